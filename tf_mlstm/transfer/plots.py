"""PNG plots of a transfer run (headless Agg): neuron histograms, the labeled-examples curve."""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

from tf_mlstm import fileio  # pylint: disable=wrong-import-position


def _save(figure, path):
    """Writes `figure` as PNG through tf.io.gfile (so gs:// paths work) and closes it."""
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    fileio.write_text_atomic(path, buffer.getvalue())
    return path


def neuron_histogram(path, values, labels, classes, threshold, title="") -> None:
    """Draws one histogram of `values` per class.

    Args:
      path, classes: the PNG to write; the (negative, positive) labels, drawn in this order.
      values, labels: [N] the neuron's feature values and the labels.
      threshold, title: drawn as a vertical line; the plot title.

    Returns:
      path.
    """
    values = np.asarray(values, np.float64)
    labels = np.asarray(labels)
    bins = _bins(values, threshold)
    figure, axes = plt.subplots(figsize=(6, 4))
    for value, color in zip(classes, ("tab:red", "tab:blue")):
        axes.hist(
            values[labels == value], bins=bins, alpha=0.55, color=color, label=f"label {value}"
        )
    axes.axvline(threshold, color="black", linestyle="--", linewidth=1, label="threshold")
    axes.set_xlabel("neuron value")
    axes.set_ylabel("texts")
    axes.set_title(title)
    axes.legend()
    return _save(figure, path)


def _bins(values, threshold):
    low, high = float(min(values.min(), threshold)), float(max(values.max(), threshold))
    if high <= low:
        low, high = low - 0.5, high + 0.5
    return np.linspace(low, high, 41)


def one_against_rest(path, panels, split) -> None:
    """Draws one histogram panel per class or label: its neuron, it against the rest.

    Args:
      path, split: the PNG to write; the split the values come from, for the axis label.
      panels: (title, values [N], targets [N] 0/1, threshold) per class or label.

    Returns:
      path.
    """
    figure, axes = plt.subplots(len(panels), 1, figsize=(6, 2.2 * len(panels)), squeeze=False)
    for ax, (title, values, targets, threshold) in zip(axes[:, 0], panels):
        values = np.asarray(values, np.float64)
        targets = np.asarray(targets).astype(bool)
        bins = _bins(values, threshold)
        ax.hist(values[~targets], bins=bins, alpha=0.55, color="tab:gray", label="rest")
        ax.hist(values[targets], bins=bins, alpha=0.55, color="tab:blue", label="this")
        ax.axvline(threshold, color="black", linestyle="--", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("texts")
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel(f"neuron value ({split})")
    return _save(figure, path)


def accuracy_curve(path, counts, accuracies, ylabel="test accuracy") -> None:
    """Draws accuracy (or another score) against the number of labeled training examples.

    Args:
      path, ylabel: the PNG to write; the y axis label.
      counts, accuracies: each point's labeled examples and accuracy (or the `ylabel` score).

    Returns:
      path.
    """
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(counts, accuracies, marker="o")
    axes.set_xscale("log")
    axes.set_xlabel("labeled training examples")
    axes.set_ylabel(ylabel)
    axes.grid(True, which="both", alpha=0.3)
    return _save(figure, path)
