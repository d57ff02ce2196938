"""The claims ledger: every claim of every committed report in one page (``docs/claims.md``).

Each report writes its claims' verdicts beside it (``claims.json``,
:func:`~fedretain.studies.reproduce.report.claims_record`); :func:`ledger` reads them all
from a results folder (``results/<preset>/claims.json``) and writes the page: the counts per
paper at the top, then every claim with its paper, table, verdict, the seeds agreeing, whether
it stays beyond the seeds' spread after Holm's correction, the scale and data it ran at, and
what would decide it. ``fedretain ledger results --out docs/claims.md`` writes it; a test
fails when the committed page disagrees with the committed reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedretain.errors import DataError
from fedretain.studies.reproduce.claims import HELD, NOT_HELD, NOT_RUN, UNDECIDED
from fedretain.studies.reproduce.markdown import table

VERDICTS = (HELD, NOT_HELD, UNDECIDED, NOT_RUN)
TITLE = "# Claims ledger"


def reports_in(folder: Path) -> list[dict[str, Any]]:
    """Every report's ``claims.json`` under ``folder`` (one level down: ``folder/<preset>/``),
    with ``folder``-relative ``report`` paths, in folder order."""
    found = []
    for path in sorted(folder.glob("*/claims.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise DataError(f"{path} is unreadable ({e}); rewrite its report") from None
        found.append({**record, "report": f"{folder.name}/{path.parent.name}/report.md"})
    if not found:
        raise DataError(f"{folder} holds no report with a claims.json (results/<preset>/)")
    return found


def earlier_reports(folder: Path) -> list[str]:
    """The reports under ``folder`` with neither a ``claims.json`` nor a tuning's
    ``choices.json``: written before the rule this page applies, so their verdicts are listed
    as not counted rather than read."""
    return [
        f"{folder.name}/{path.parent.name}/report.md"
        for path in sorted(folder.glob("*/report.md"))
        if not any((path.parent / f).exists() for f in ("claims.json", "choices.json"))
    ]


def papers_of(reports: list[dict[str, Any]]) -> dict[str, list[tuple[dict, dict]]]:
    """paper -> its claims, each with the report that tests it, in report order."""
    out: dict[str, list[tuple[dict, dict]]] = {}
    for report in reports:
        for claim in report["claims"]:
            out.setdefault(claim.get("paper") or report["paper"], []).append((report, claim))
    return out


def verdict_of(claim: dict[str, Any]) -> str:
    return claim["verdict"] if claim["verdict"] in VERDICTS else NOT_RUN


def page_link(report: str) -> str:
    """A report's path as a link to its page of the documentation site (docs/hooks/results.py
    renders ``results/<preset>/report.md`` there)."""
    return f"[`{report}`]({report})"


def counts_table(papers: dict[str, list]) -> list[str]:
    """The markdown table of each paper's claims by verdict, and their total."""
    rows = []
    totals = dict.fromkeys(VERDICTS, 0)
    for paper, claims in papers.items():
        counts = dict.fromkeys(VERDICTS, 0)
        for _, claim in claims:
            counts[verdict_of(claim)] += 1
        totals = {k: totals[k] + counts[k] for k in totals}
        rows.append([paper, str(len(claims)), *(str(counts[v]) for v in VERDICTS)])
    rows.append(["all", str(sum(totals.values())), *(str(totals[v]) for v in VERDICTS)])
    return table(["paper", "claims", *VERDICTS], rows)


def ledger_counts(folder: Path) -> str:
    """:func:`counts_table` of the reports under ``folder`` (the home page shows it)."""
    return "\n".join(counts_table(papers_of(reports_in(folder))))


def ledger(folder: Path) -> str:
    """The ledger page of the reports under ``folder``."""
    reports = reports_in(folder)
    papers = papers_of(reports)
    lines = [
        TITLE,
        "",
        "Every claim of the papers that a committed report tests, with its verdict under one "
        "rule: a claim holds only when every comparison it makes exceeds both the seeds' spread "
        "(a paired 95 % t-interval over the seeds) and a practical threshold (1 point of "
        "accuracy, 10 % of rounds, ...); it did not hold when the opposite, or no gap that "
        "matters, is established the same way; otherwise it is undecided, with the reason and "
        "what would decide it. 'Holm': whether the decision stays beyond the spread after "
        "Holm's correction for the number of claims its report tests. Each report's own "
        "Claims section gives the gaps and intervals ([Reproducing the papers](reproduce.md)).",
        "",
        "This page is generated from the committed reports' `claims.json` "
        "(`fedretain ledger results --out docs/claims.md`); a test fails when it disagrees "
        "with them.",
        "",
        "## Counts per paper",
        "",
    ]
    lines += [*counts_table(papers), ""]
    lines += ["## The reports", ""]
    rows = [
        [page_link(r["report"]), r["title"], r["scale"], str(r["seeds"]), r["data"]]
        for r in reports
    ]
    lines += [*table(["report", "title", "scale", "seeds", "data"], rows), ""]
    earlier = earlier_reports(folder)
    if earlier:
        lines += [
            "Not counted here: "
            + ", ".join(f"`{r}`" for r in earlier)
            + ". These reports were written before this rule (no `claims.json` beside them, "
            "and their runs' results were not committed); their verdicts may say more than "
            "their seeds carry. Each is regenerated by the `fedretain reproduce` command at its "
            "top, which writes the `claims.json` this page reads.",
            "",
        ]
    for paper, claims in papers.items():
        lines += [f"## {paper}", ""]
        head = ["report", "claim", "verdict", "seeds agreeing", "Holm", "what would decide it"]
        rows = []
        for report, claim in claims:
            verdict = verdict_of(claim)
            why = claim.get("why", "")
            holm = {True: "yes", False: "no", None: "-"}[claim.get("holm")]
            rows.append(
                [
                    f"[`{report['preset']}`]({report['report']}) ({report['scale']}, "
                    f"{report['data']})",
                    claim["claim"],
                    f"**{verdict}**" + (f": {why}" if why else ""),
                    claim.get("seeds_agreeing", ""),
                    holm,
                    claim.get("decide", ""),
                ]
            )
        lines += [*table(head, rows), ""]
    return "\n".join(lines)


def write_ledger(folder: Path, out: Path) -> Path:
    """:func:`ledger` of ``folder`` written to ``out`` (atomically)."""
    from fedretain.files import atomic_write_text

    atomic_write_text(out, ledger(folder))
    return out


__all__ = ["ledger", "reports_in", "write_ledger"]
