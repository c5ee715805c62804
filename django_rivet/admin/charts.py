"""Small charts for the overview page, drawn on the server as inline SVG.

No script and no CDN: each chart is a few ``<rect>`` elements with a
``<title>`` per bar (the browser shows it on hover) and an ``aria-label``
that says what the chart shows in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

__all__ = ["Series", "bars"]

WIDTH = 480
HEIGHT = 90
AXIS = 14  # room for the labels under the bars


@dataclass(frozen=True, slots=True)
class Series:
    """One set of bars: a value per bucket (None: no data), a colour, a name."""

    name: str
    values: Sequence[float | None]
    colour: str


def _scale(series: Sequence[Series]) -> float:
    top = max(
        (value for one in series for value in one.values if value is not None),
        default=0.0,
    )
    return top if top > 0 else 1.0


def _tick(index: int, groups: int, slot: float) -> tuple[str, str]:
    """Place a label: the end ones anchored inside the chart, so none is cut."""
    if index == 0:
        return "0", "start"
    if index == groups - 1:
        return str(WIDTH), "end"
    return f"{index * slot + slot / 2:.1f}", "middle"


def bars(
    series: Sequence[Series],
    labels: Sequence[str],
    *,
    description: str,
    unit: str = "",
) -> SafeString:
    """Draw grouped bars, one group per label (buckets in time order).

    ``labels`` are shown under the first, middle and last groups only, so a
    24-bucket chart stays readable at 480 pixels.
    """
    groups = len(labels)
    top = _scale(series)
    plot = HEIGHT - AXIS
    slot = WIDTH / max(groups, 1)
    width = max(slot / (len(series) + 1), 1.0)
    rects = []
    for index in range(groups):
        for offset, one in enumerate(series):
            value = one.values[index]
            if value is None:
                continue
            height = max(plot * value / top, 1.0 if value else 0.0)
            rects.append(
                (
                    f"{index * slot + offset * width + width / 2:.1f}",
                    f"{plot - height:.1f}",
                    f"{width:.1f}",
                    f"{height:.1f}",
                    one.colour,
                    f"{one.name} {labels[index]}: {value:g}{unit}",
                )
            )
    shown = sorted({0, groups // 2, groups - 1}) if groups else []
    ticks = [
        (*_tick(index, groups, slot), HEIGHT - 2, labels[index]) for index in shown
    ]
    return format_html(
        '<svg class="rivet-chart" viewBox="0 0 {} {}" width="{}" height="{}" '
        'role="img" aria-label="{}"><line x1="0" y1="{}" x2="{}" y2="{}" '
        'stroke="#999" stroke-width="1"/>{}{}</svg>',
        WIDTH,
        HEIGHT,
        WIDTH,
        HEIGHT,
        description,
        plot,
        WIDTH,
        plot,
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title>'
            "</rect>",
            rects,
        ),
        format_html_join(
            "",
            '<text x="{}" text-anchor="{}" y="{}" font-size="10" fill="#666">{}</text>',
            ticks,
        ),
    )
