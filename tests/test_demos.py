"""Pieces of the demos that their CI runs (`demo NAME --steps 30`) do not check: the logic demo's multi-thread
note and the render demo's labelled, upscaled PNGs."""

from __future__ import annotations

import math
import struct
import sys
import zlib

import pytest
import torch
from relaxops.demos import logic, render


def test_threads_note_speedup():
    assert logic.threads_note(2, 1.9, 2.0, 2) == "2 threads: 1.90x one thread"


@pytest.mark.parametrize(
    "threads, speedup, busy, cores, reason",
    [
        (2, 0.8, 1.2, 2, "other processes held the cores (load average "),
        (4, 1.0, 2.0, 2, "there are more threads than cores"),
        (2, 1.05, 2.0, 2, "what the threads share (memory bandwidth, caches) limits them"),
    ],
)
def test_threads_note_says_why_not_faster(threads, speedup, busy, cores, reason):
    note = logic.threads_note(threads, speedup, busy, cores)
    assert note.startswith(
        f"{threads} threads: {speedup:.2f}x one thread (they kept {busy:.1f} cores busy on a "
        f"machine with {cores} cores): not faster, because "
    )
    assert reason in note


def read_png(path) -> torch.Tensor:
    """The 8-bit greyscale PNG that write_png writes, as uint8 [H, W] (one IDAT chunk, filter 0 per row)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, pos = {}, 8
    while pos < len(data):
        (length,), tag = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0] == zlib.crc32(tag + body)
        chunks[tag] = body
        pos += 12 + length
    w, h, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 0)
    raw = torch.frombuffer(bytearray(zlib.decompress(chunks[b"IDAT"])), dtype=torch.uint8).view(h, w + 1)
    assert (raw[:, 0] == 0).all()
    return raw[:, 1:]


def test_render_strip_is_labelled_and_upscaled(tmp_path):
    target, fit = torch.rand(3, 10, 12), torch.rand(3, 10, 12).round()
    image = render.strip(("TARGET", target), ("FIT", fit))
    s, label_w = render.SCALE, 6 * len("TARGET") + 3
    assert image.shape == (s * (2 * 10 + 2), s * (label_w + 2 + 3 * (12 + 2) - 2))
    base = image[::s, ::s]
    assert torch.equal(image, base.repeat_interleave(s, 0).repeat_interleave(s, 1))  # nearest neighbour
    for row, views in ((0, target), (1, fit)):
        top = row * 12
        for i, view in enumerate(views):
            left = label_w + 2 + i * 14
            assert torch.equal(base[top : top + 10, left : left + 12], view)
    for row, label in ((0, "TARGET"), (1, "FIT")):  # the label's glyphs, vertically centred in its row
        glyphs = render.text(label)
        tile = base[row * 12 + 1 : row * 12 + 8, 2 : 2 + glyphs.shape[1]]
        assert torch.equal(tile == 1, glyphs == 1)
    assert not torch.equal(render.text("TARGET"), render.text("TARGTE"))
    path = tmp_path / "strip.png"
    render.write_png(str(path), image)
    assert torch.equal(read_png(path), (image * 255).round().to(torch.uint8))


@pytest.mark.parametrize("module", ["sklearn.datasets", "tqdm"])
def test_missing_demo_extra_names_the_install_command(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # import fails
    message = r'the logic demo needs scikit-learn and tqdm .*pip install "relaxops\[demo\]"'
    with pytest.raises(ImportError, match=message):
        logic.main(steps=1)


def test_depth_demo_runs_and_writes_its_images(tmp_path, monkeypatch, capsys):
    """A few steps at a tiny size (the CI run is `demo depth --steps 30`): the pose moves towards the truth, the
    printed errors are finite, and the four labelled PNGs hold the target's and the fit's depth and normal rows."""
    from relaxops.demos import depth

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(depth, "SIZE", 16)
    monkeypatch.setattr(depth, "AZIMUTHS", depth.AZIMUTHS[:2])
    depth.main(steps=3)
    out = capsys.readouterr().out
    start = math.dist(depth.POSE_START, depth.POSE_TRUE)
    final = float(out.split("pose error ")[1].split(" degrees")[0])
    assert final < start - 1, out  # three Adam steps of lr 1.5 towards the true angles
    assert "nan" not in out and out.count("depth error") == 4 and "voxel IoU" in out, out
    label_w = 6 * len("TARGET NORMAL") + 3
    for name in depth.IMAGES:
        image = read_png(tmp_path / name)
        views = 1 if "pose" in name else 2
        s = render.SCALE
        assert image.shape == (s * (4 * 16 + 3 * 2), s * (label_w + 2 + views * (16 + 2) - 2)), name
        assert image.float().std() > 0, name
