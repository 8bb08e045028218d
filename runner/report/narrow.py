"""A wide table on a narrow terminal: one block per row instead of columns squeezed to "claude-h…".

Rich shrinks every column of a table wider than the terminal, and ids with no space to wrap at are cut
(`runner models` was unreadable under ~200 columns). Where the table's natural width does not fit, each
row is printed as its first cell, then one `header: value` line per other column, wrapping as text does.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text


def fitted(table: Table, console: Console) -> RenderableType:
    """`table` itself where it fits `console`'s width, else its rows as blocks."""
    if console.measure(table, options=console.options.update_width(1_000_000)).maximum <= console.width:
        return table
    headers = [str(c.header) for c in table.columns]
    cells = [[str(cell) for cell in c.cells] for c in table.columns]
    parts: list[RenderableType] = [Text(str(table.title or ""), style="bold")] if table.title else []
    for row in zip(*cells, strict=True):
        parts.append(Text(row[0], style="bold"))
        parts += [
            Text.from_markup(f"  [dim]{escape(h)}:[/] {escape(v)}")
            for h, v in zip(headers[1:], row[1:], strict=True)
        ]
    if table.caption:
        parts.append(Text(str(table.caption), style="dim"))
    return Group(*parts)
