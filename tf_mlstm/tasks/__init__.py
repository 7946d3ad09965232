"""The distributed runner's tasks, one kind of training each (neither imports the other).

`language_model.LanguageModelTask` (`tf-mlstm-train`) and
`finetune.FinetuneTask` (`tf-mlstm-finetune`) supply what
`train.task_protocol.Task` asks; `train.runner` does the rest.
"""
