"""Automatic settings: the hardware, measured steps, the model's size for a budget, its law."""
