"""What `tf-mlstm-export` and `tf_mlstm.export` export, without TensorFlow.

The binary builds its config before TensorFlow starts (its flags are checked
in well under a second), so the config lives apart from the export itself
(`serving.export`), as the transfer binaries' settings do (`transfer.settings`).
"""

import dataclasses

from tf_mlstm import errors


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """What to export. Field names match the flags of `tf-mlstm-export`.

    Attributes:
      model_dir: a `tf-mlstm-train` (or `tf-mlstm-finetune`) run folder.
      export_dir: the folder of SavedModel versions; the export goes to
        `export_dir/<checkpoint step>`.
      classifier: a `tf-mlstm-transfer` classifier.json: adds the `classify`
        signature ("" = a fine-tuned run's own head, if `model_dir` is one).
      window: bytes per model call inside the signatures.
      max_text_bytes: the longest text or prompt a request may hold.
      max_generate_length: the largest `length` `generate` accepts.
      precision: the policy the signatures compute in; None = the one the
        classifier's features were fitted in (float32 without one).
      allow_other_model: export a classifier fitted on other weights than
        those of `model_dir` (with a warning) instead of refusing it.
    """

    model_dir: str
    export_dir: str
    classifier: str = ""
    window: int = 256
    # The same as serving.saved_model.DEFAULT_MAX_* (not imported here: it imports TensorFlow).
    max_text_bytes: int = 65536
    max_generate_length: int = 4096
    precision: str | None = None
    allow_other_model: bool = False

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        for name in ("window", "max_text_bytes", "max_generate_length"):
            value = getattr(self, name)
            if value <= 0:
                raise errors.InvalidValueError(f"--{name} must be positive, got {value}")
        return self
