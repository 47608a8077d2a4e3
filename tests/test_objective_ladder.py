"""The ladder benchmark's report: Table 5.7's layout and the recorded training time."""



from experiments import objective_ladder


def row(objective: str, multiplier: float, cola: float, rte: float, seconds: float) -> dict:
    return {"objective": objective, "generator_multiplier": multiplier, "steps": 600,
            "train_flops": 3.48e13, "train_seconds": seconds, "finetune_train_seconds": seconds,
            "scores": {"CoLA": {"median": cola}, "RTE": {"median": rte}},
            "average": 100 * (cola + rte) / 2}


def test_table_has_one_row_per_run_with_medians_in_percent():
    lines = objective_ladder.table([row("electra", 0.5, 0.1, 0.55, 60)], "objective",
                                   lambda r: r["objective"]).splitlines()
    assert lines[0] == "| objective | CoLA | RTE | average | steps | train FLOPs |"
    assert lines[2] == "| electra | 10.0 | 55.0 | 32.5 | 600 | 3.48e+13 |"


def test_time_line_counts_the_shared_electra_run_once():
    """The 1/2-generator row of the size sweep is the ladder's ELECTRA run, not a new one."""
    ladder = [row("electra", 0.5, 0, 0, 600), row("mlm", 0.5, 0, 0, 1200)]
    sweep = [row("electra", 0.25, 0, 0, 300), row("electra", 0.5, 0, 0, 600)]
    line = objective_ladder.time_line(ladder + sweep)
    assert line.startswith("Training loops recorded: pre-training 35 min, fine-tuning 35 min")
