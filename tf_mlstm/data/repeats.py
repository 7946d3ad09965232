"""`--source_repeats`: copies of each source's documents training reads (TensorFlow-free)."""

from tf_mlstm import errors


def parse_source_repeats(spec) -> tuple[tuple[str, int], ...]:
    """Parses `PATTERN=COUNT,...` into `((pattern, count), ...)`.

    Args:
      spec: comma-separated rules, e.g. "*/amazon/*=8" (a glob over the source path).

    Returns:
      A tuple of (pattern, count) pairs, in the order given.

    Raises:
      ValueError: a rule that is not PATTERN=COUNT with COUNT an integer >= 1.
    """
    rules = []
    for rule in (piece.strip() for piece in spec.split(",")):
        if not rule:
            continue
        pattern, sep, count = rule.rpartition("=")
        if not sep or not pattern or not count.strip().isdigit() or int(count) < 1:
            raise errors.InvalidValueError(
                f"source_repeats: {rule!r} is not PATTERN=COUNT with an integer COUNT >= 1 "
                "(e.g. '*/amazon/*=8')"
            )
        rules.append((pattern.strip(), int(count)))
    return tuple(rules)
