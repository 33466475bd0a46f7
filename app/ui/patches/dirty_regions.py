"""A partial screen update renders only the widgets it changes, not all in the box around them.

Textual's compositor draws a partial update by rendering every widget that overlaps the
bounding box of the dirty regions (`Region.from_union`), each over all its visible rows, and
then writes only the dirty spans. With 8 panes streaming in a grid, two panes drawing in one
frame (or a pane and the input a key changed) are far apart, so their box covers most of the
screen: every pane's transcript, status line, input and border was rendered again to write
the rows of two of them (StylesCache.render_widget took ~45% of the UI thread's screen
updates under bench.key_latency --server). Here a widget is rendered only if it overlaps a
dirty region, and only over the rows where it does; the spans written are the same, so the
screen is too (tests/app/ui/test_dirty_regions.py compares every update with Textual's own).
No Textual issue asks for this yet; drop it if a Textual release renders by dirty region.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip


class DirtyRegionsCompositor(Compositor):
    """Textual's compositor, whose partial updates render by dirty region (see the module)."""

    # False: render the dirty regions' bounding box, as Textual does (bench.key_latency's "before").
    enabled: bool = True

    def render_partial_update(self) -> ChopsUpdate | None:
        if not self.enabled:
            return super().render_partial_update()
        regions = [r for r in self._dirty_regions if r]
        self._dirty_regions.clear()
        if not regions:
            return None
        spans = list(self._regions_to_spans(regions))
        chops = self.dirty_chops(regions, {y for y, _, _ in spans}.__contains__)
        return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in self.cuts])

    def dirty_chops(
        self, regions: Sequence[Region], is_rendered_line: Callable[[int], bool]
    ) -> list[dict[int, Strip | None]]:
        """What Textual's `_render_chops` gives for the bounding box of `regions`, on the rows and
        columns `regions` cover (elsewhere a chop may be left empty: it is not written)."""
        cuts = self.cuts
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        for shown, strips in self._dirty_renders(regions):
            first_cut, last_cut = shown.column_span
            for y, strip in zip(shown.line_range, strips, strict=False):
                if not is_rendered_line(y):
                    continue
                chops_line = chops[y]
                final_cuts = [cut for cut in cuts[y] if last_cut >= cut >= first_cut]
                pieces = strip.divide([cut - shown.x for cut in final_cuts[1:]])
                for cut, piece in zip(final_cuts, pieces, strict=False):
                    if chops_line.get(cut) is None:  # front to back: the first render of a cut wins
                        chops_line[cut] = piece
        return chops

    def _dirty_renders(self, regions: Sequence[Region]) -> Iterable[tuple[Region, list[Strip]]]:
        """Per visible widget that overlaps a dirty region (front to back), the screen region of
        its rows that do and their lines (its full visible width: the chops are cut at its edges)."""
        box = Region.from_union(regions)
        for widget, (region, clip) in self.visible_widgets.items():
            shown = region.intersection(clip)
            if not shown or not box.overlaps(shown):
                continue
            dirty = [r.intersection(shown) for r in regions if r.overlaps(shown)]
            if not dirty:
                continue
            top = min(r.y for r in dirty)
            bottom = max(r.bottom for r in dirty)
            rows = Region(shown.x, top, shown.width, bottom - top)
            yield rows, widget.render_lines(rows.translate(-region.offset))
