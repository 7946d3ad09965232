"""Serving: the SavedModel a trained run is exported as, with string-in signatures."""
