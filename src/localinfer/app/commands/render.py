"""Text layout shared by the commands that print facts: titled sections of aligned ``label  value`` rows, and the
perplexity report ``perplexity`` and ``quantize --calibrate`` print."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from localinfer.quantize.perplexity import Report

LABEL_WIDTH = 20


def section(title: str, rows: Iterable[str]) -> list[str]:
    """``title`` indented two spaces, its rows four, and a blank line after."""
    return [f"  {title}", *(f"    {row}" for row in rows), ""]


def row(label: str, value: str | None, *, width: int = LABEL_WIDTH) -> str:
    """``label`` padded to ``width`` then ``value``; the label alone when ``value`` is None."""
    return label if value is None else f"{label.ljust(width)}{value}"


def format_parameters(count: int) -> str:
    """A parameter count the way model cards write it: ``134.5M``, ``1.2B``, ``950K``; below 1000 as is."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if round(count / scale, 1) >= 1:
            return f"{count / scale:.1f}".removesuffix(".0") + suffix
    return str(count)


def perplexity_table(report: Report, *, model: str, base: str | None) -> str:
    """The report on one screen: perplexity, and the divergence figures when a base was measured."""
    rows = [
        row("perplexity", f"{report.ppl:.4f} ± {report.ppl_error:.4f}"),
        row("scored", f"{report.scored} tokens in {report.chunks} chunks of {report.ctx}"),
    ]
    lines = section(f"{model}", rows)
    d = report.divergence
    if d is not None and base is not None:
        lines += section(
            f"against {base}",
            [
                row("base perplexity", f"{d.base_ppl:.4f}"),
                row("PPL ratio", f"{report.ppl / d.base_ppl:.4f}"),
                row("mean KLD", f"{d.kld_mean:.6f}"),
                row("99% KLD", f"{d.kld_p99:.6f}"),
                row("max KLD", f"{d.kld_max:.6f}"),
                row("same top token", f"{100 * d.same_top:.2f} %"),
                row("mean Δp", f"{100 * d.mean_delta_p:+.3f} %"),
            ],
        )
    return "\n".join(lines).rstrip("\n")
