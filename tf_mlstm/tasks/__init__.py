"""The distributed runner's tasks (`train.task_protocol.Task`): `language_model`, `finetune`."""
