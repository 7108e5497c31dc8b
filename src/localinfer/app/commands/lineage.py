"""What ``show`` adds for a model ``quantize`` made: its source and type, the importance matrix used, and the
figures of ``quantize --check``."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from localinfer.app.commands.render import row, section
from localinfer.models.store import ModelStore
from localinfer.quantize.lineage import describe_imatrix, read_lineage

if TYPE_CHECKING:
    from localinfer.config import Settings
    from localinfer.models.store import Manifest


def lineage_json(settings: Settings, manifest: Manifest) -> dict[str, Any]:
    """``{"lineage": record}`` for a model localinfer quantized, as raw values; ``{}`` for other models."""
    lineage = read_lineage(ModelStore(settings.models_dir), manifest)
    return {} if lineage is None else {"lineage": asdict(lineage)}


def lineage_text(settings: Settings, manifest: Manifest) -> str:
    """A "Lineage" section (source, type, and quality figures when measured), or "" for other models."""
    lineage = read_lineage(ModelStore(settings.models_dir), manifest)
    if lineage is None:
        return ""
    rows = [
        row("quantized from", f"{lineage.source_name} ({lineage.source_type or 'unknown type'}, {lineage.source})"),
        row("type", lineage.type + (" (requantized)" if lineage.requantized else "")),
        row("imatrix", describe_imatrix(lineage.imatrix) if lineage.imatrix else "none"),
    ]
    quality = lineage.quality or {}
    divergence = quality.get("divergence") or {}
    if quality:
        rows.append(row("perplexity", f"{quality['ppl']:.4f} (ctx {quality['ctx']}, {quality['chunks']} chunks)"))
    if divergence:
        rows += [
            row("source perplexity", f"{divergence['base_ppl']:.4f}"),
            row("mean KLD", f"{divergence['kld_mean']:.6f} (99%: {divergence['kld_p99']:.6f})"),
            row("same top token", f"{100 * divergence['same_top']:.2f} %"),
            row("mean Δp", f"{100 * divergence['mean_delta_p']:+.3f} %"),
        ]
    return "\n\n" + "\n".join(section("Lineage", rows)).rstrip("\n")
