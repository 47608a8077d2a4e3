"""Task registry: a name -> a fresh `Task` (see `electra.tasks.base` for the interface)."""

from __future__ import annotations

from electra.errors import ElectraError
from electra.tasks.base import Example, Task
from electra.tasks.glue import SPECS, GlueTask, glue_name
from electra.tasks.squad import VERSIONS as SQUAD_VERSIONS
from electra.tasks.tagging import DATASETS as TAGGING
from electra.tasks.tagging import TaggingTask

__all__ = ["Example", "Task", "get_task", "get_task_name", "task_from_state", "task_names"]


def task_names() -> list[str]:
    return [*SPECS, *TAGGING, *SQUAD_VERSIONS, "user"]


def get_task(name: str, label_names: tuple[str, ...] | list[str] = (), **options) -> Task:
    """A new task object by name (GLUE names are case-insensitive; "user" needs options; SQuAD
    takes doc_stride, max_query_len and max_answer_len). `label_names` name the integer
    classes of data in the Hub's layouts whose features do not (`--label-names`)."""
    task = _new_task(name, **options)
    task.label_names = tuple(label_names)
    return task


def _new_task(name: str, **options) -> Task:
    canonical = glue_name(name)
    if canonical is not None:
        return GlueTask(canonical)
    if name.lower() in TAGGING:
        return TaggingTask(name.lower(), TAGGING[name.lower()])
    if name.lower() in SQUAD_VERSIONS:
        from electra.tasks.squad import SquadTask

        options = {k: v for k, v in options.items() if v is not None and k != "version"}
        return SquadTask(SQUAD_VERSIONS[name.lower()], **options)
    if name.lower() == "user":
        from electra.tasks.user import UserTask

        return UserTask(**options)
    raise ElectraError(f"unknown task {name!r}; choose one of {', '.join(task_names())} "
                       "or glue")


def get_task_name(name: str) -> str:
    """The canonical name `get_task(name)` would give (an error for an unknown name)."""
    canonical = glue_name(name)
    if canonical is not None:
        return canonical
    if name.lower() in (*TAGGING, *SQUAD_VERSIONS, "user"):
        return name.lower()
    get_task(name)  # raises the unknown-task error
    return name


def task_from_state(state: dict) -> Task:
    """The task a fine-tuned model recorded (`Task.state()`), labels and options restored."""
    task = get_task(state.get("kind", state["name"]), **state.get("options", {}))
    task.load_state(state)
    return task
