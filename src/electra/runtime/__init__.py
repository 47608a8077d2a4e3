"""What every training loop runs on (pre-training, fine-tuning, multi-task, CVT): the step
skeleton, the metrics log, checkpoints, speed accounting, optimizers and schedules, preemption
and distributed helpers. It imports nothing from the loops built on it."""
