"""Each family's tensor names on disk, and the other names of the same tensors transformers also loads.

``Lfm2Config.expected_shapes`` (and each family's override) lists the names as they are on disk: what
the published LiquidAI checkpoints hold and what transformers' ``save_pretrained`` writes. transformers
renames some of them in memory (its ``conversion_mapping.py``), and a checkpoint saved from that
memory layout by other tools holds those names instead; transformers loads both. This table is the
one place lfm-chat knows those other names; the loader maps them back to the on-disk ones before it
checks anything, so every error names a tensor as the checkpoint holds it.

    lfm2      no other names
    lfm2_moe  all experts of a layer stacked: ``experts.gate_up_proj`` [E, 2I, H] (each expert's w1 then
              w3) and ``experts.down_proj`` [E, H, I], for the per-expert ``experts.N.w1/w3/w2.weight``
    lfm3      ``self_attn.g_proj.weight`` (in memory) for ``self_attn.gate_proj.weight`` (on disk)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from model.checkpoint.tensor_location import TensorLocation
from model.errors import CheckpointError


@dataclass(frozen=True, slots=True)
class Renamed:
    """A name part transformers reads in place of the on-disk one (a plain rename)."""

    other: str
    on_disk: str


@dataclass(frozen=True, slots=True)
class StackedExperts:
    """All experts' matrices of one kind in one tensor [experts, parts x rows, cols], for the on-disk
    ``<prefix>.<expert>.<part>`` ones: expert e's part j is rows j*rows..(j+1)*rows of slice e, which
    lies contiguous in the file, so it is read as a tensor of its own."""

    stacked: str  # e.g. "feed_forward.experts.gate_up_proj"
    parts: tuple[str, ...]  # on-disk names after "<prefix>.<expert>.", in the stacked order


OtherName = Renamed | StackedExperts

OTHER_NAMES: dict[str, tuple[OtherName, ...]] = {
    "lfm2": (),
    "lfm2_moe": (
        StackedExperts("feed_forward.experts.gate_up_proj", ("w1.weight", "w3.weight")),
        StackedExperts("feed_forward.experts.down_proj", ("w2.weight",)),
    ),
    "lfm3": (Renamed(".self_attn.g_proj.", ".self_attn.gate_proj."),),
}


def on_disk_names(
    found: dict[str, TensorLocation], expected: dict[str, tuple[int, ...]], model_type: str
) -> dict[str, TensorLocation]:
    """``found`` with every other name of ``model_type``'s table turned into its on-disk name(s).

    A stacked tensor whose layer the config gives no such experts, or of the wrong shape, is an
    error naming it; a tensor held under both names is an error naming the on-disk one.
    """
    result: dict[str, TensorLocation] = {}
    for name, location in found.items():
        for on_disk, part in _on_disk(name, location, expected, OTHER_NAMES.get(model_type, ())):
            if on_disk in result:
                raise CheckpointError(f"checkpoint holds tensor {on_disk} twice (under two names)")
            result[on_disk] = part
    return result


def _on_disk(
    name: str, location: TensorLocation, expected: dict[str, tuple[int, ...]], forms: tuple[OtherName, ...]
) -> list[tuple[str, TensorLocation]]:
    for form in forms:
        if isinstance(form, Renamed) and form.other in name:
            return [(name.replace(form.other, form.on_disk), location)]
        if isinstance(form, StackedExperts) and name.endswith("." + form.stacked):
            return _unstacked(name, location, expected, form)
    return [(name, location)]


def _unstacked(
    name: str, location: TensorLocation, expected: dict[str, tuple[int, ...]], form: StackedExperts
) -> list[tuple[str, TensorLocation]]:
    """Expert e's parts of a stacked tensor, each a location of its own inside it."""
    prefix = name.removesuffix(form.stacked.rsplit(".", 1)[1])  # "...feed_forward.experts."
    part_shape = expected.get(f"{prefix}0.{form.parts[0]}")
    if part_shape is None:
        return [(name, location)]  # no experts there: reported as an unexpected tensor
    experts = sum(1 for n in expected if n.startswith(prefix) and n.endswith("." + form.parts[0]))
    rows, cols = part_shape
    want = (experts, len(form.parts) * rows, cols)
    if location.shape != want:
        raise CheckpointError(f"tensor {name} has shape {location.shape}, expected {want} from config.json")
    part_bytes = math.prod(part_shape) * location.dtype.itemsize
    return [
        (
            f"{prefix}{e}.{part}",
            dataclasses.replace(location, offset=location.offset + (e * len(form.parts) + j) * part_bytes,
                                shape=part_shape),
        )
        for e in range(experts)
        for j, part in enumerate(form.parts)
    ]  # fmt: skip
