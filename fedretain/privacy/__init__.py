"""Privacy of the clients' payloads: attacks on what a client sends and defences against them.

- :mod:`fedretain.privacy.attacks` inverts a client's uplink back into its training images
  (DLG, iDLG, Inverting Gradients); :mod:`fedretain.privacy.quality` scores the reconstructions
  (PSNR, SSIM) and draws them.
- :mod:`fedretain.privacy.dpsgd`: sample-level DP-SGD as a transformation of an algorithm's
  local step (Opacus's per-example gradients, or ``torch.func``'s);
  :mod:`fedretain.privacy.accounting`: each client's RDP accountant.
- :mod:`fedretain.privacy.client_dp`: client-level DP-FedAvg (fixed and adaptive clipping) as a
  transformation of an algorithm's server step.
- :mod:`fedretain.privacy.mechanisms`: the ``privacy`` config component that chooses one
  (``privacy=dpsgd``, ``client_fixed``, ``client_adaptive``) and keeps a run's ε.

``fedretain privacy`` (:mod:`fedretain.studies.privacy`) puts the attacks and the defences
side by side, as FedReg's Table 4.
"""
