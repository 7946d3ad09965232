r"""tf-mlstm-generate: sample review text from a trained model.

  tf-mlstm-generate --model_dir=runs/r1 --prompt="This movie" --length=300
  tf-mlstm-generate --model_dir=runs/r1 --neuron=2388 --neuron_value=1.0 \
      --num_samples=3 --seed=7                    # positive reviews on demand
  tf-mlstm-generate --model_dir=runs/r1 --classifier=runs/r1/sst/classifier.json \
      --sentiment=negative                        # the neuron tf-mlstm-transfer found

The model continues the (normalized) prompt one byte at a time, until the end
of the review unless `--nostop_at_end`. `--neuron` holds one cell-state unit
at `--neuron_value` after every byte; `--classifier` takes the unit from a
tf-mlstm-transfer classifier.json and holds it two standard deviations past
its threshold on the `--sentiment` side (`--neuron` and `--neuron_value`
still win). Each sample is printed as prompt and continuation, after a
`=== sample K ===` line when there are several.
"""

from absl import flags

from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config.binaries import GenerateConfig
from tf_mlstm.config.choices import SENTIMENTS

FLAGS = flags.FLAGS


_REQUIRED = ("model_dir",)
"""The flags without which the binary does not start."""


def define_generate_flags() -> None:
    """Defines every tf-mlstm-generate flag from `GenerateConfig` (`run` marks required ones)."""
    defaults = GenerateConfig(model_dir="")
    _flags.define_fields(
        defaults,
        (
            "model_dir",
            "prompt",
            "length",
            "temperature",
            "seed",
            "neuron",
            "neuron_value",
            "classifier",
            "sentiment",
            "num_samples",
            "stop_at_end",
        ),
        choices={"sentiment": SENTIMENTS},
        no_default=_REQUIRED,
    )


def check_before_work(flag_values) -> None:
    """The model and the classifier, before TensorFlow starts (`preflight`)."""
    preflight.check_trained_model(flag_values.model_dir)
    preflight.check_input_file("classifier", flag_values.classifier, "classifier file")


def generate_texts(config, model=None, sampler=None) -> list[str]:
    """Samples `config.num_samples` continuations of the prompt.

    Args:
      config: a validated `GenerateConfig`.
      model: the language model (default: loaded from `config.model_dir`).
      sampler: a `sampling.make_sampler(model)` to reuse across calls.

    Returns:
      `num_samples` strs, each the normalized prompt and its continuation.

    Raises:
      FileNotFoundError: no trained model in `config.model_dir`, or no `config.classifier`.
      ValueError: `neuron` outside the model, or an invalid or mismatched classifier.
    """
    from tf_mlstm.models import language_model  # pylint: disable=g-import-not-at-top
    from tf_mlstm.models import sampling  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer.probe import neuron as neuron_lib  # pylint: disable=g-import-not-at-top

    if model is None:
        model = language_model.MLSTMLanguageModel.from_run(config.model_dir)
    unit, value, hidden_state = neuron_lib.held_unit(
        config.classifier,
        model.hidden_size,
        config.neuron,
        config.neuron_value,
        config.sentiment,
        tool="tf-mlstm-generate",
    )
    return sampling.generate_texts(
        model,
        config.prompt,
        config.length,
        num_samples=config.num_samples,
        temperature=config.temperature,
        seed=config.seed,
        neuron=unit,
        neuron_value=value,
        stop_at_end=config.stop_at_end,
        sampler=sampler,
        hidden_state=hidden_state,
    )


def main(config) -> None:
    """Prints the samples."""
    texts = generate_texts(config)
    for index, text in enumerate(texts):
        if len(texts) > 1:
            print(f"=== sample {index + 1} ===")
        print(text)


def run() -> None:
    """Entry point of `tf-mlstm-generate`."""
    _main.run_binary(
        __name__, define_generate_flags, main, GenerateConfig, required=list(_REQUIRED)
    )


if __name__ == "__main__":
    run()
