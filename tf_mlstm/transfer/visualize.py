"""One unit's activation over text: an HTML page and a PNG heat map.

A character's activation is the unit's value after the model read its last byte, each text
from a reset state. Colors run red, yellow, green, flipped for a neuron of sign -1.
"""

import html
import json
import os

import numpy as np
import tensorflow as tf
from absl import logging
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models import sampling
from tf_mlstm.models.preprocessor import BytePreprocessor

COLORMAP = "RdYlGn"
HTML_FILE = "neuron_{neuron}.html"
PNG_FILE = "neuron_{neuron}.png"
JSON_FILE = "neuron_{neuron}.json"
# Characters are written into heat-map cells up to this many cells; beyond it
# they would be unreadable and slow to draw.
_MAX_LABELED_CELLS = 6000


def unit_activations(model, texts, neuron, hidden_state=False) -> list[np.ndarray]:
    """The cell (or hidden) value of one unit after each character of each text.

    Args:
      model: an `MLSTMLanguageModel`.
      texts: normalized texts (see `normalize_text`); each is run from a reset state.
      neuron, hidden_state: index of the unit, and whether it is a hidden-state one (else cell).

    Returns:
      A list of float32 arrays, one per text, `len(text)` values each.

    Raises:
      ValueError: `neuron` is outside the model.
    """
    if not 0 <= neuron < model.hidden_size:
        raise errors.InvalidValueError(
            f"neuron must be in [0, {model.hidden_size - 1}] (the model has "
            f"{model.hidden_size} cell units), got {neuron}."
        )
    trace_fn = tf.function(
        lambda ids: sampling.feed_bytes(model, ids, unit=neuron, hidden_state=hidden_state)[2],
        input_signature=[tf.TensorSpec([1, None], tf.int32)],
        autograph=False,
    )
    framer = BytePreprocessor(normalize=False)
    activations = []
    for text in texts:
        per_byte = trace_fn(tf.constant(framer.frame([text]).ids))[0].numpy()
        # A character's value is the one after its last byte; byte 0 is the
        # framing DOC_START.
        last_byte = np.cumsum([len(ch.encode("utf-8")) for ch in text], dtype=np.int64)
        activations.append(per_byte[last_byte].astype(np.float32))
    return activations


def color_scale(activations, scale=None) -> float:
    """The absolute value drawn as full red / full green.

    Args:
      activations: the per-text value arrays.
      scale: a fixed scale; None or 0 for the largest absolute value.

    Returns:
      The scale as a float, at least 1e-6.
    """
    if scale:
        return float(scale)
    peak = max((float(np.max(np.abs(a))) for a in activations if a.size), default=0.0)
    return max(peak, 1e-6)


def _rgb(values, scale):
    """Colors [n, 3] in 0..255 for values on a symmetric scale."""
    cmap = colormaps[COLORMAP]
    rgba = cmap(np.clip(0.5 + 0.5 * np.asarray(values) / scale, 0.0, 1.0))
    return np.round(rgba[:, :3] * 255).astype(int)


def _check_sign(sign):
    if sign not in (1, -1):
        raise errors.InvalidValueError(f"sign must be +1 or -1, got {sign}.")


def _sign_note(sign):
    if sign == 1:
        return ""
    return " (colors flipped: the sentiment neuron's sign is -1, so green = positive)"


def _state_name(hidden_state):
    return "Hidden" if hidden_state else "Cell"


def render_html(texts, activations, neuron, scale=None, sign=1, hidden_state=False) -> str:
    """An HTML page with every character colored by its activation.

    Args:
      texts, activations: the texts, as given to `unit_activations`, and its result.
      neuron: the unit index (for the title).
      scale: the absolute value shown as full red / green (default: the largest).
      sign: -1 flips the colors, so green means positive.
      hidden_state: the unit is a hidden-state one (for the titles).

    Returns:
      The page as str; each character escaped, its (unflipped) value in a tooltip.

    Raises:
      ValueError: a sign other than +1/-1.
    """
    _check_sign(sign)
    scale = color_scale(activations, scale)
    blocks = []
    for index, (text, values) in enumerate(zip(texts, activations)):
        spans = []
        for ch, value, (r, g, b) in zip(text, values, _rgb(sign * values, scale)):
            spans.append(
                f'<span style="background-color: rgb({r}, {g}, {b})" '
                f'title="{value:+.4f}">{html.escape(ch)}</span>'
            )
        blocks.append(f'<div class="text" id="text-{index}">{"".join(spans)}</div>')
    low, mid, high = (
        f"rgb({r}, {g}, {b})" for r, g, b in _rgb(sign * np.array([-scale, 0.0, scale]), scale)
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html><head><meta charset="utf-8">',
            f"<title>{_state_name(hidden_state)} unit {neuron}</title>",
            "<style>body { font-family: sans-serif; } "
            ".text { font-family: monospace; white-space: pre-wrap; margin: 1em 0; "
            "line-height: 1.6; }</style>",
            "</head><body>",
            f"<h1>{_state_name(hidden_state)} unit {neuron}{html.escape(_sign_note(sign))}</h1>",
            f"<p>{_state_name(hidden_state)} state after each character: "
            f'<span style="background-color: {low}">'
            f'{-scale:+.3f}</span> <span style="background-color: {mid}">0</span> '
            f'<span style="background-color: {high}">{scale:+.3f}</span>; hover a '
            "character for its value.</p>",
            *blocks,
            "</body></html>",
            "",
        ]
    )


def render_heatmap(
    texts, activations, neuron, path, width=64, scale=None, sign=1, hidden_state=False
) -> str:
    """Writes a PNG heat map: texts wrapped at `width` characters, one cell each.

    Args:
      texts, activations: the texts, as given to `unit_activations`, and its result.
      neuron: the unit index (for the title).
      path, width: the PNG file to write, and characters per row.
      scale, sign, hidden_state: as in `render_html`.

    Returns:
      `path`.

    Raises:
      ValueError: a sign other than +1/-1.
    """
    _check_sign(sign)
    scale = color_scale(activations, scale)
    rows, labels = [], []
    for text, values in zip(texts, activations):
        for start in range(0, max(len(text), 1), width):
            row = np.full(width, np.nan, np.float32)
            chunk = sign * values[start : start + width]
            row[: len(chunk)] = chunk
            rows.append(row)
            labels.append(text[start : start + width])
        rows.append(np.full(width, np.nan, np.float32))  # a gap between texts
        labels.append("")
    grid = np.stack(rows[:-1])
    labels = labels[:-1]
    figure = Figure(figsize=(max(4.0, 0.16 * width + 1.5), max(1.5, 0.22 * len(grid) + 1.0)))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(
        np.ma.masked_invalid(grid),
        cmap=COLORMAP,
        vmin=-scale,
        vmax=scale,
        aspect="auto",
        interpolation="nearest",
    )
    if grid.size <= _MAX_LABELED_CELLS:
        for y, line in enumerate(labels):
            for x, ch in enumerate(line):
                # parse_math=False: a "$" is a character here, not mathtext.
                axes.text(x, y, ch, ha="center", va="center", fontsize=7, parse_math=False)
    axes.set_xticks([])
    axes.set_yticks([])
    axes.set_title(
        f"{_state_name(hidden_state)} unit {neuron}: {'-1 x ' if sign == -1 else ''}"
        f"{_state_name(hidden_state).lower()} state after each character"
    )
    figure.colorbar(image, ax=axes, fraction=0.03, pad=0.02)
    with tf.io.gfile.GFile(path, "wb") as f:
        figure.savefig(f, format="png", dpi=100, bbox_inches="tight")
    return path


def write_visualization(
    model, texts, neuron, output_dir, width=64, scale=None, sign=1, source=None, hidden_state=False
) -> dict:
    """Normalizes texts, computes the unit's activations, writes HTML, PNG, JSON.

    Args:
      model, texts: an `MLSTMLanguageModel`, and raw texts.
      neuron: the cell-state unit.
      output_dir, width: destination folder (created), and heat-map characters per row.
      scale, sign: as in `render_html`.
      source: where the unit came from (a classifier file), for the JSON; None: chosen directly.
      hidden_state: `neuron` is a hidden-state unit; recorded in the JSON as `state`.

    Returns:
      dict: the `html`, `png` and `json` paths and the per-character `activations`.

    Raises:
      ValueError: no text left, `neuron` outside the model, or a sign not +1/-1.
    """
    _check_sign(sign)
    normalized = [normalize_text(text) for text in texts]
    kept = [text for text in normalized if text]
    if len(kept) < len(normalized):
        logging.warning("Skipped %d empty text(s).", len(normalized) - len(kept))
    if not kept:
        raise errors.InvalidValueError(
            "no text to visualize (every input text is empty after normalization)."
        )
    activations = unit_activations(model, kept, neuron, hidden_state)
    tf.io.gfile.makedirs(output_dir)
    paths = {
        kind: os.path.join(output_dir, name.format(neuron=neuron))
        for kind, name in (("html", HTML_FILE), ("png", PNG_FILE), ("json", JSON_FILE))
    }
    records = [
        {"text": text, "values": [round(float(v), 6) for v in values]}
        for text, values in zip(kept, activations)
    ]
    # Beside their names first, renamed in together: a failure leaves earlier
    # files as they were, and a link at a name is replaced, never written through.
    with fileio.Staged() as staged:
        with tf.io.gfile.GFile(staged.path(paths["html"]), "w") as f:
            f.write(render_html(kept, activations, neuron, scale, sign, hidden_state))
        render_heatmap(
            kept, activations, neuron, staged.path(paths["png"]), width, scale, sign, hidden_state
        )
        with tf.io.gfile.GFile(staged.path(paths["json"]), "w") as f:
            f.write(
                json.dumps(
                    {
                        "neuron": neuron,
                        "state": _state_name(hidden_state).lower(),
                        "sign": sign,
                        "source": source,
                        "texts": records,
                    },
                    ensure_ascii=False,
                )
            )
    logging.info("Wrote %s", ", ".join(paths.values()))
    return {**paths, "activations": activations}
