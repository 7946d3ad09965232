"""SavedModel export with string-in serving signatures."""
