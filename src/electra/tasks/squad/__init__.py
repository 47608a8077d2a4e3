"""SQuAD v1.1/v2.0: reading and windowing (`data`), XLNet's span head and answer selection
(`head`), the official metrics (`metrics`) and the task behind the fine-tuning interface
(`task`)."""

from electra.tasks.squad.task import VERSIONS, SpanPrediction, SquadTask, split_squad_file

__all__ = ["VERSIONS", "SpanPrediction", "SquadTask", "split_squad_file"]
