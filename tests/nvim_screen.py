"""The screen of an embedded Neovim, rebuilt from its UI protocol and drawn to a PNG.

A test attaches a UI with ``nvim.ui_attach(cols, rows, rgb=True, ext_linegrid=True, ext_messages=True)``
(pynvim; with ext_messages Neovim never waits at a hit-enter prompt, and messages arrive as ``msg_show``
events, kept in :attr:`Screen.messages`, instead of on the grid); Neovim then
sends ``redraw`` notifications (``:help ui-linegrid``), which pynvim queues while the test makes requests.
:meth:`Screen.sync` reads them up to a marker notification and applies them to a character grid with
highlight ids; :meth:`Screen.save_png` draws the grid with Pillow in DejaVu Sans Mono (bundled with
matplotlib), the colours Neovim sent, and the cursor. What is drawn is exactly what a terminal UI would show:
ghost text appears only if Neovim put it on the grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SYNC_EVENT = "fastcoder_screen_sync"


def _rgb(value: int | None, default: tuple[int, int, int]) -> tuple[int, int, int]:
    if value is None or value < 0:
        return default
    return (value >> 16) & 0xFF, (value >> 8) & 0xFF, value & 0xFF


class Screen:
    """Grid 1 of a linegrid UI: ``cells[row][col] = (text, hl_id)``, highlight attributes by id, cursor."""

    def __init__(self, cols: int, rows: int):
        self.cols, self.rows = cols, rows
        self.cells = [[(" ", 0)] * cols for _ in range(rows)]
        self.attrs: dict[int, dict[str, Any]] = {0: {}}
        self.fg, self.bg = (0xE0, 0xE2, 0xEA), (0x14, 0x16, 0x1B)
        self.cursor = (0, 0)
        self.mode = ""
        self.events = 0
        self.messages: list[tuple[str, str]] = []  # (kind, text) from msg_show (ext_messages)

    # -- UI events ------------------------------------------------------------------------------------
    def apply(self, name: str, args: list) -> None:
        """Apply one ``redraw`` event (``[name, *param_tuples]``)."""
        handler = getattr(self, "_ev_" + name, None)
        if handler is None:
            return
        for params in args:
            handler(*params)
        self.events += 1

    def _ev_grid_resize(self, grid, width, height):
        self.cols, self.rows = width, height
        self.cells = [[(" ", 0)] * width for _ in range(height)]

    def _ev_default_colors_set(self, fg, bg, sp, *_):
        self.fg, self.bg = _rgb(fg, self.fg), _rgb(bg, self.bg)

    def _ev_hl_attr_define(self, hl_id, rgb_attr, *_):
        self.attrs[hl_id] = dict(rgb_attr)

    def _ev_grid_clear(self, grid):
        self.cells = [[(" ", 0)] * self.cols for _ in range(self.rows)]

    def _ev_grid_cursor_goto(self, grid, row, col):
        self.cursor = (row, col)

    def _ev_mode_change(self, mode, idx):
        self.mode = mode

    def _ev_msg_show(self, kind, content, *_):
        self.messages.append((kind, "".join(chunk[1] for chunk in content)))

    def _ev_grid_line(self, grid, row, col, cells, *_):
        hl = 0
        line = self.cells[row]
        for cell in cells:
            text = cell[0]
            if len(cell) > 1:
                hl = cell[1]
            repeat = cell[2] if len(cell) > 2 else 1
            for _ in range(repeat):
                if col < self.cols:
                    line[col] = (text, hl)
                col += 1

    def _ev_grid_scroll(self, grid, top, bot, left, right, rows, cols):
        if rows > 0:  # up: row r gets row r + rows
            for r in range(top, bot - rows):
                self.cells[r][left:right] = self.cells[r + rows][left:right]
        elif rows < 0:
            for r in range(bot - 1, top - rows - 1, -1):
                self.cells[r][left:right] = self.cells[r + rows][left:right]

    # -- reading --------------------------------------------------------------------------------------
    def sync(self, nvim, timeout_s: float = 10.0) -> None:
        """Make Neovim redraw, then apply every queued notification up to a marker sent after the redraw."""
        nvim.command("redraw")
        nvim.exec_lua(f"vim.rpcnotify(0, '{SYNC_EVENT}')")
        while True:
            msg = nvim.next_message()
            if msg is None:
                raise TimeoutError("no marker notification from nvim")
            kind, name, args = msg[0], msg[1], msg[2]
            if kind == "notification" and name == SYNC_EVENT:
                return
            if kind == "notification" and name == "redraw":
                for event in args:
                    self.apply(event[0], event[1:])

    def text_lines(self) -> list[str]:
        return ["".join(text for text, _ in row) for row in self.cells]

    def highlighted_text(self, row: int, attr: str = "foreground") -> dict[Any, str]:
        """Text of a row grouped by the value of one highlight attribute (e.g. ghost text's colour)."""
        groups: dict[Any, str] = {}
        for text, hl in self.cells[row]:
            key = self.attrs.get(hl, {}).get(attr)
            groups[key] = groups.get(key, "") + text
        return groups

    # -- drawing --------------------------------------------------------------------------------------
    def save_png(self, path: Path, font_size: int = 16) -> Path:
        """Draw the grid to ``path`` (PNG) and return it."""
        from PIL import Image, ImageDraw, ImageFont  # noqa: PLC0415 (drawing only)

        font_path = _mono_font()
        font = ImageFont.truetype(font_path, font_size)
        italic = ImageFont.truetype(font_path.replace("DejaVuSansMono.ttf", "DejaVuSansMono-Oblique.ttf"), font_size)
        bold = ImageFont.truetype(font_path.replace("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf"), font_size)
        left, top, right, bottom = font.getbbox("M")
        cw = round(font.getlength("M"))
        ch = round(font_size * 1.35)
        pad = 8
        img = Image.new("RGB", (self.cols * cw + 2 * pad, self.rows * ch + 2 * pad), self.bg)
        draw = ImageDraw.Draw(img)
        for r, row in enumerate(self.cells):
            for c, (text, hl) in enumerate(row):
                a = self.attrs.get(hl, {})
                fg, bg = _rgb(a.get("foreground"), self.fg), _rgb(a.get("background"), self.bg)
                if a.get("reverse"):
                    fg, bg = bg, fg
                x, y = pad + c * cw, pad + r * ch
                if bg != self.bg:
                    draw.rectangle([x, y, x + cw - 1, y + ch - 1], fill=bg)
                if text and text != " ":
                    f = italic if a.get("italic") else bold if a.get("bold") else font
                    draw.text((x, y + (ch - font_size) // 2 - 1), text, font=f, fill=fg)
                if a.get("underline") or a.get("undercurl"):
                    draw.line([x, y + ch - 2, x + cw - 1, y + ch - 2], fill=fg)
        cr, cc = self.cursor
        x, y = pad + cc * cw, pad + cr * ch
        if self.mode.startswith("insert"):
            draw.rectangle([x, y, x + 1, y + ch - 1], fill=self.fg)  # bar cursor in insert mode
        else:
            draw.rectangle([x, y, x + cw - 1, y + ch - 1], outline=self.fg)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        img.save(path)
        return path


def _mono_font() -> str:
    """DejaVu Sans Mono: matplotlib's copy (a dependency of fastcoder), else the system's."""
    try:
        import matplotlib  # noqa: PLC0415

        candidate = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSansMono.ttf"
        if candidate.is_file():
            return str(candidate)
    except ImportError:
        pass
    system = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")
    if system.is_file():
        return str(system)
    raise FileNotFoundError("DejaVuSansMono.ttf not found (install matplotlib or fonts-dejavu-core)")
