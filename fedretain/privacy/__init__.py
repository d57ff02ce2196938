"""Privacy of the clients' payloads: attacks on what a client sends and defences against them.

:mod:`fedretain.privacy.attacks` inverts a client's uplink back into its training images
(DLG, iDLG, Inverting Gradients); :mod:`fedretain.privacy.quality` scores the reconstructions
(PSNR, SSIM) and draws them.
"""
