"""The tasks of the distributed runner, side by side: one kind of training each.

`language_model.LanguageModelTask` trains the mLSTM language model on
TFRecord shards (`tf-mlstm-train`); `finetune.FinetuneTask` trains a
`MLSTMClassifier` on labeled text (`tf-mlstm-finetune`). Each supplies what
`tf_mlstm.train.task_protocol.Task` asks for, and the runner
(`tf_mlstm.train.runner`) does the rest: strategy, step, checkpoints,
budget, faults. Neither task imports the other.
"""
