"""A minimal PNG reader and writer with numpy only (Debian's python3 has no PIL).

Used by tests/report_renders_in_chromium.py (to check that a screenshot is a real, non-blank image) and by
scripts/make-gallery.sh (to turn Chromium's screenshots of the figures into small palette PNGs):

    python3 tests/png_util.py shrink IN.png OUT.png [COLOURS]    # palette PNG of at most COLOURS (256) colours
    python3 tests/png_util.py info IN.png                        # width, height, distinct colours
"""
import struct
import sys
import zlib

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunks(data):
    """(type, payload) of every chunk, checking the signature and each CRC."""
    if data[:8] != SIGNATURE:
        raise ValueError("not a PNG: bad signature")
    pos = 8
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("truncated PNG chunk")
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, payload = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(kind + payload) != crc:
            raise ValueError(f"bad CRC in chunk {kind!r}")
        yield kind, payload
        pos += 12 + n


def header(data):
    """(width, height, bit depth, colour type, interlace) from IHDR, the first chunk."""
    kind, payload = next(chunks(data))
    if kind != b"IHDR":
        raise ValueError("PNG does not start with IHDR")
    w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", payload)
    return w, h, depth, ctype, interlace


def decode(data):
    """8-bit, non-interlaced PNG (grey, RGB, palette, with or without alpha) -> uint8 array (h, w, channels)."""
    w, h, depth, ctype, interlace = header(data)
    if depth != 8 or interlace:
        raise ValueError(f"unsupported PNG: bit depth {depth}, interlace {interlace}")
    idat, palette = b"", None
    for kind, payload in chunks(data):
        if kind == b"PLTE":
            palette = np.frombuffer(payload, np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat += payload
        elif kind == b"IEND":
            break
    ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    raw = np.frombuffer(zlib.decompress(idat), np.uint8)
    if raw.size != h * (w * ch + 1):
        raise ValueError("PNG image data has the wrong size")
    raw = raw.reshape(h, w * ch + 1)
    filters = raw[:, 0].astype(np.int64)
    if filters.max(initial=0) > 4:
        raise ValueError("bad PNG filter type")
    line = raw[:, 1:].reshape(h, w, ch).astype(np.int64)
    # Unfiltering pixel (y, x) needs (y, x-1), (y-1, x) and (y-1, x-1), all on earlier anti-diagonals, so each
    # anti-diagonal y + x = k is decoded in one vectorised step: h + w steps instead of h * w.
    out = np.zeros((h + 1, w + 1, ch), np.int64)
    for k in range(h + w - 1):
        y = np.arange(max(0, k - w + 1), min(h, k + 1))
        x = k - y
        a, b, c = out[y + 1, x], out[y, x + 1], out[y, x]
        pa, pb, pc = np.abs(b - c), np.abs(a - c), np.abs(a + b - 2 * c)
        paeth = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
        f = filters[y][:, None]
        pred = np.select([f == 0, f == 1, f == 2, f == 3], [np.zeros_like(a), a, b, (a + b) // 2], paeth)
        out[y + 1, x + 1] = (line[y, x] + pred) & 255
    img = out[1:, 1:].astype(np.uint8)
    if ctype == 3:
        if palette is None:
            raise ValueError("palette PNG without PLTE")
        img = palette[img[..., 0]]
    return img


def _chunk(kind, payload):
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def encode(img, palette=None):
    """uint8 RGB (h, w, 3), or palette indices (h, w) with `palette` (n <= 256, 3) -> PNG bytes."""
    h, w = img.shape[:2]
    ctype, rows = (2, img.reshape(h, w * 3)) if palette is None else (3, img)
    rows = rows.astype(np.uint8)
    up = rows.copy()
    up[1:] -= rows[:-1]  # uint8 arithmetic wraps, as the Up filter wants
    candidates = [np.hstack([np.full((h, 1), f, np.uint8), r]) for f, r in ((0, rows), (2, up))]
    best = min((zlib.compress(c.tobytes(), 9) for c in candidates), key=len)
    out = SIGNATURE + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0))
    if palette is not None:
        out += _chunk(b"PLTE", np.asarray(palette, np.uint8).tobytes())
    return out + _chunk(b"IDAT", best) + _chunk(b"IEND", b"")


def distinct_colours(img):
    rgb = img[..., :3].astype(np.int64)
    return len(np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]))


def shrink(img, colours=256, spacing=10):
    """Palette PNG of an RGB image. The palette takes colours in order of frequency, skipping any within `spacing`
    (RGB distance) of one already taken, so that the shades of anti-aliased edges do not crowd out a rare but
    distinct colour (a small community in a graph); every pixel is then mapped to its nearest palette colour."""
    rgb = img[..., :3].astype(np.int64)
    packed = ((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]).ravel()
    values, inverse, counts = np.unique(packed, return_inverse=True, return_counts=True)
    unpack = lambda v: np.stack([(v >> 16) & 255, (v >> 8) & 255, v & 255], axis=1)
    all_values = unpack(values)
    palette = []
    for spread in (spacing, 0):  # a second pass without spacing fills any places left
        for i in np.argsort(-counts, kind="stable"):
            if len(palette) == colours:
                break
            c = all_values[i]
            if not palette or ((np.asarray(palette) - c) ** 2).sum(axis=1).min() > spread * spread:
                palette.append(c)
    palette = np.asarray(palette)
    nearest = np.empty(len(values), np.int64)
    for start in range(0, len(values), 4096):  # bounded memory: 4096 x colours distances at a time
        d = ((all_values[start:start + 4096, None, :] - palette[None, :, :]) ** 2).sum(axis=2)
        nearest[start:start + 4096] = d.argmin(axis=1)
    index = nearest[inverse].reshape(img.shape[:2])
    return encode(index, palette)


def main(argv):
    if len(argv) >= 3 and argv[0] == "shrink":
        with open(argv[1], "rb") as f:
            img = decode(f.read())
        data = shrink(img, int(argv[3]) if len(argv) > 3 else 256)
        with open(argv[2], "wb") as f:
            f.write(data)
        return 0
    if len(argv) == 2 and argv[0] == "info":
        with open(argv[1], "rb") as f:
            data = f.read()
        img = decode(data)
        print(f"{img.shape[1]} x {img.shape[0]}, {distinct_colours(img)} colours, {len(data)} bytes")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
