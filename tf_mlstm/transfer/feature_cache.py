"""Features of labeled texts kept on disk, so a rerun that would compute the same ones reads them.

An entry's key is what decides the numbers: the model's weights and sizes, the texts, the
precision, `--window` and the versions. Entries are written whole, checked on read, evicted
least recently used above a cap (docs/transfer.md, "The feature cache").
"""

import hashlib
import json
import os
import time
from typing import Self

import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import _version
from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm.auto import measure
from tf_mlstm.config.transfer import FEATURE_CACHE_CAP_ENV as CAP_ENV
from tf_mlstm.config.transfer import FEATURE_CACHE_CAP_MB as DEFAULT_CAP_MB  # noqa: F401
from tf_mlstm.config.transfer import feature_cache_cap_bytes as cap_bytes

FORMAT = 1
"""The entry format (and the featurization code's) version; raising it retires every entry."""
MAGIC = b"tf_mlstm features\n"
SUFFIX = ".features"
_MAX_HEADER = 1 << 16
_KINDS_SEPARATOR = "+"


def cache_dir() -> str:
    """`$XDG_CACHE_HOME/tf_mlstm/features`, or `~/.cache/tf_mlstm/features` without it."""
    return os.path.join(os.path.dirname(measure.cache_path()), "features")


def texts_digest(texts) -> str:
    """SHA-256 (hex) of `texts` in order: each text's UTF-8 bytes, after its length."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


class FeatureCache:
    """The cached features of one model in one setting.

    Args:
      weights_sha256, architecture: the model's `rundir.weights_checksum`, and its sizes (a dict).
      precision, window: the policy features are computed in, and bytes per model call.
      folder, cap: where entries live, and their size cap in bytes; None: `cache_dir()`,
        `cap_bytes()`.

    Example:
    >>> import numpy as np
    >>> from tf_mlstm.transfer.feature_cache import FeatureCache
    >>> cache = FeatureCache("0" * 64, {"hidden_size": 2}, "float32", window=256, folder="features")
    >>> texts = ["good", "bad"]
    >>> cache.get(texts, ["mean"]) is None  # a miss
    True
    >>> _ = cache.put(texts, {"mean": np.ones((2, 2), "float32")})
    >>> cache.get(texts, ["mean"])["mean"].tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(self, weights_sha256, architecture, precision, window, folder=None, cap=None):
        self.folder = folder or cache_dir()
        self.cap = cap_bytes() if cap is None else int(cap)
        self._identity = {
            "format": FORMAT,
            "weights_sha256": weights_sha256,
            "architecture": dict(architecture),
            "precision": precision,
            "window": int(window),
            "tf_mlstm": _version.__version__,
            "tensorflow": tf.__version__,
        }

    @classmethod
    def for_model(cls, model, weights_sha256, precision, window, **kwargs) -> Self:
        """The cache of `model`'s features (its architecture read from it)."""
        backbone = getattr(model, "backbone", None)
        architecture = (
            backbone.architecture() if backbone is not None else {"hidden_size": model.hidden_size}
        )
        return cls(weights_sha256, architecture, precision, window, **kwargs)

    def key(self, texts) -> str:
        """The hex key of `texts`' features under this model and setting."""
        identity = dict(self._identity, texts=texts_digest(texts), count=len(texts))
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:40]

    def path(self, key, kinds) -> str:
        """The entry file of `key` holding `kinds` (in the order they are stored)."""
        return os.path.join(self.folder, f"{key}.{_KINDS_SEPARATOR.join(kinds)}{SUFFIX}")

    # === Reading ===

    def get(self, texts, kinds, what="texts") -> dict[str, np.ndarray] | None:
        """The cached features of `texts` for `kinds`, or None (a miss; a damaged entry warns).

        Args:
          texts, kinds: the texts, in order, and the feature kinds wanted.
          what: which texts, for the log ("train").

        Returns:
          dict kind -> float32 [len(texts), H] (writable), or None.
        """
        if self.cap <= 0:
            return None
        started = time.monotonic()
        key = self.key(texts)
        for path, stored in self._entries_of(key):
            if not set(kinds) <= set(stored):
                continue
            try:
                arrays = _read_entry(path, key, stored, len(texts))
            except FileNotFoundError:
                continue  # evicted by another process since the listing
            except (OSError, ValueError) as e:
                logging.warning(
                    "Feature cache entry %s is damaged (%s): computing the %s features again.",
                    path,
                    e,
                    what,
                )
                _remove_quietly(path)
                continue
            _touch(path)
            logging.info(
                "Features of the %d %s texts read from the cache in %.1f s: %s",
                len(texts),
                what,
                time.monotonic() - started,
                path,
            )
            return {kind: arrays[kind] for kind in kinds}
        return None

    def _entries_of(self, key):
        """(path, kinds) of each entry of `key`, fewest kinds first."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        found = []
        for name in names:
            if name.startswith(f"{key}.") and name.endswith(SUFFIX):
                kinds = name[len(key) + 1 : -len(SUFFIX)].split(_KINDS_SEPARATOR)
                found.append((os.path.join(self.folder, name), tuple(kinds)))
        return sorted(found, key=lambda entry: len(entry[1]))

    # === Writing ===

    def put(self, texts, features, what="texts") -> str | None:
        """Stores `features` of `texts` (a refused write only warns), then evicts down to the cap.

        Args:
          texts, features: the texts, in order, and dict kind -> [len(texts), H] arrays.
          what: which texts, for the log.

        Returns:
          The entry's path, or None when not stored.
        """
        if self.cap <= 0 or not features:
            return None
        kinds = tuple(features)
        arrays = [np.ascontiguousarray(features[kind], dtype="<f4") for kind in kinds]
        shape = arrays[0].shape
        if any(a.shape != shape or a.ndim != 2 or a.shape[0] != len(texts) for a in arrays):
            raise ValueError(f"features of unlike shapes {[a.shape for a in arrays]}")
        size = sum(a.nbytes for a in arrays)
        if size > self.cap:
            logging.info(
                "The %s features (%.0f MB) exceed the feature cache's cap of %.0f MB (%s): "
                "not stored.",
                what,
                size / 1e6,
                self.cap / 1e6,
                CAP_ENV,
            )
            return None
        key = self.key(texts)
        path = self.path(key, kinds)
        digest = hashlib.sha256()
        for array in arrays:
            digest.update(memoryview(array).cast("B"))
        header = {
            "key": key,
            "kinds": list(kinds),
            "rows": shape[0],
            "columns": shape[1],
            "sha256": digest.hexdigest(),
        }
        try:
            with fileio.write_errors(self.folder):
                os.makedirs(self.folder, exist_ok=True)
                with fileio.replacing(path) as staged:
                    with open(staged, "wb") as f:
                        f.write(MAGIC)
                        f.write(json.dumps(header, sort_keys=True).encode() + b"\n")
                        for array in arrays:
                            f.write(memoryview(array).cast("B"))
        except errors.WriteError as e:
            logging.warning(
                "Feature cache %s not written (%s); the run goes on, and the next one computes "
                "the %s features again.",
                self.folder,
                errors.one_line(e.__cause__ or e),
                what,
            )
            return None
        self.evict(keep=path)
        return path

    def evict(self, keep=None) -> None:
        """Removes least recently used entries (ended writers' leftovers first) down to the cap.

        Args:
          keep: an entry never removed (the one just written).
        """
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            if name.startswith(fileio.TMP_PREFIX) and SUFFIX in name:
                final = name[len(fileio.TMP_PREFIX) :].split("-", 1)[0]
                fileio.clean_leftovers(os.path.join(self.folder, final))
        entries, total = [], 0
        for name in os.listdir(self.folder):
            path = os.path.join(self.folder, name)
            if SUFFIX not in name:
                continue
            try:
                stat = os.stat(path)
            except OSError:
                continue
            total += stat.st_size
            if name.endswith(SUFFIX) and not name.startswith(".") and path != keep:
                entries.append((stat.st_mtime, stat.st_size, path))
        removed, freed = 0, 0
        for _, size, path in sorted(entries):
            if total <= self.cap:
                break
            if _remove_quietly(path):
                removed, freed = removed + 1, freed + size
            total -= size
        if removed:
            logging.info(
                "Feature cache: %d least recently used entries (%.0f MB) removed to stay under "
                "%.0f MB (%s): %s",
                removed,
                freed / 1e6,
                self.cap / 1e6,
                CAP_ENV,
                self.folder,
            )


def _read_entry(path, key, kinds, rows):
    """The arrays of one entry file, checked whole; ValueError names what does not match."""
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ValueError("not a feature cache entry")
        line = f.readline(_MAX_HEADER)
        try:
            header = json.loads(line)
        except ValueError:
            raise ValueError("unreadable header") from None
        if not isinstance(header, dict) or header.get("key") != key:
            raise ValueError("header of another key")
        if header.get("kinds") != list(kinds) or header.get("rows") != rows:
            raise ValueError("header of other kinds or rows")
        columns = header.get("columns")
        if not isinstance(columns, int) or columns <= 0:
            raise ValueError("header without its columns")
        expected = 4 * rows * columns * len(kinds)
        payload = bytearray(expected)
        got = f.readinto(payload)
        if got != expected or f.read(1):
            raise ValueError(f"{got} bytes of features where {expected} belong (truncated?)")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise ValueError("SHA-256 mismatch")
    flat = np.frombuffer(payload, dtype="<f4").reshape(len(kinds), rows, columns)
    return {kind: flat[k] for k, kind in enumerate(kinds)}


def _touch(path):
    """Marks an entry as just used (its time is what eviction orders by)."""
    try:
        os.utime(path)
    except OSError:
        pass  # a read-only cache: the order is by time of writing


def _remove_quietly(path):
    try:
        os.remove(path)
        return True
    except OSError:
        return False
