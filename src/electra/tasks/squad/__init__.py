"""SQuAD v1.1/v2.0: reading and windowing (`data`), answer selection from the span heads' beams
(`head`), the official metrics (`metrics`) and the task behind the fine-tuning interface
(`task`)."""

from electra.tasks.squad.task import VERSIONS, SpanPrediction, SquadTask, split_squad_file

__all__ = ["VERSIONS", "SpanPrediction", "SquadTask", "split_squad_file"]
