"""Training: strategies, schedules, the loop, checkpoints, evaluation."""
