"""What TensorFlow Serving reads beside an export: batching parameters and a model config.

`measure_batching` times a signature at growing batch sizes on the exporting
machine and chooses the server's batching from it; `Batching.text` and
`model_config_text` are the files in the formats of the server's
`--batching_parameters_file` and `--model_config_file` (docs/serving.md).
"""

import dataclasses
import os
import time
from collections.abc import Callable

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

BATCHING_FILE = os.path.join("assets.extra", "batching_parameters.txt")
"""The measured batching parameters, relative to the version folder."""
MODEL_CONFIG_FILE = os.path.join("assets.extra", "models.config")
"""A model config entry for a multi-model server, relative to the version folder."""
# A batch size whose texts/s come within this share of the best measured is large enough:
# a larger one adds latency for little throughput.
ENOUGH_OF_THE_BEST = 0.9


@dataclasses.dataclass(frozen=True)
class Batching:
    """TensorFlow Serving's batching for one export, chosen from measured rates.

    Attributes:
      max_batch_size: the largest batch the server forms.
      batch_timeout_micros: how long a request waits for others to join its batch.
      num_batch_threads: batches run at once (this machine's cores).
      max_enqueued_batches: batches queued before the server refuses requests.
      allowed_batch_sizes: the sizes a batch is padded to, ascending, ending at the largest.
      texts_per_second: {batch size: texts per second} as measured.
      text_bytes: the bytes of each text measured.

    Example:
    >>> from tf_mlstm.serving.server_config import Batching
    >>> batching = Batching(8, 1000, 2, 2, (1, 2, 4, 8), {8: 100.0}, 256)
    >>> print(batching.text().splitlines()[0])
    max_batch_size { value: 8 }
    """

    max_batch_size: int
    batch_timeout_micros: int
    num_batch_threads: int
    max_enqueued_batches: int
    allowed_batch_sizes: tuple[int, ...]
    texts_per_second: dict[int, float]
    text_bytes: int

    def text(self) -> str:
        """The parameters in the text format of the server's `--batching_parameters_file`."""
        lines = [
            f"max_batch_size {{ value: {self.max_batch_size} }}",
            f"batch_timeout_micros {{ value: {self.batch_timeout_micros} }}",
            f"num_batch_threads {{ value: {self.num_batch_threads} }}",
            f"max_enqueued_batches {{ value: {self.max_enqueued_batches} }}",
        ]
        lines += [f"allowed_batch_sizes: {size}" for size in self.allowed_batch_sizes]
        return "\n".join(lines) + "\n"

    def record(self) -> dict:
        """The choice and its measurement, for the export's meta.json."""
        record = dataclasses.asdict(self)
        record["allowed_batch_sizes"] = list(self.allowed_batch_sizes)
        record["texts_per_second"] = {
            str(size): round(rate, 1) for size, rate in self.texts_per_second.items()
        }
        return record


def measure_batching(
    call: Callable[[int], object],
    text_bytes: int,
    largest: int = 64,
    budget_s: float = 10.0,
    threads: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Batching:
    """Times `call` at batch sizes 1, 4, 16, ... and chooses the server's batching.

    After one call to warm up, each size is timed twice (the faster
    counts); the sizes stop at `largest`, or once the time spent passes
    `budget_s`. The batch size is the smallest whose texts/s reach
    `ENOUGH_OF_THE_BEST` of the best; a request waits for others at most a
    tenth of that batch's time.

    Args:
      call: runs the signature on that many texts of `text_bytes` bytes.
      text_bytes: the bytes of each text `call` sends (recorded).
      largest: the largest batch size measured (a power of four).
      budget_s: seconds to spend measuring, at most about.
      threads: batches run at once; None: this machine's cores.
      clock: seconds, for timing.

    Returns:
      A `Batching`.
    """
    rates = {}
    started = clock()
    call(1)
    size = 1
    while size <= largest:
        seconds = []
        for _ in range(2):
            begin = clock()
            call(size)
            seconds.append(clock() - begin)
        rates[size] = size / max(min(seconds), 1e-9)
        if clock() - started > budget_s:
            break
        size *= 4
    best = max(rates.values())
    chosen = min(size for size, rate in rates.items() if rate >= ENOUGH_OF_THE_BEST * best)
    threads = threads or os.cpu_count() or 1
    timeout = int(0.1 * chosen / rates[chosen] * 1e6)
    return Batching(
        max_batch_size=chosen,
        batch_timeout_micros=min(max(timeout, 100), 100_000),
        num_batch_threads=threads,
        max_enqueued_batches=threads,
        allowed_batch_sizes=tuple(size for size in rates if size <= chosen),
        texts_per_second=rates,
        text_bytes=text_bytes,
    )


def model_config_text(name: str, base_path: str) -> str:
    """One model's entry in the text format of the server's `--model_config_file`.

    Args:
      name: the model's name in requests (`/v1/models/NAME`).
      base_path: the folder of its versions as the server sees it.

    Returns:
      A `ModelServerConfig` with that one model, as text.

    Example:
    >>> from tf_mlstm.serving.server_config import model_config_text
    >>> print(model_config_text("mlstm", "/models/mlstm"))
    model_config_list {
      config {
        name: "mlstm"
        base_path: "/models/mlstm"
        model_platform: "tensorflow"
      }
    }
    <BLANKLINE>
    """
    config = model_server_config_pb2.ModelServerConfig()
    config.model_config_list.config.add(name=name, base_path=base_path, model_platform="tensorflow")
    return text_format.MessageToString(config)
