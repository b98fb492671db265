"""The smoke suite: the rows of a recipe's Verified table, run by `check` name with their `params`
against a running OpenAI-compatible vLLM server, sized for that server (cookbook/prove/smoke/sizing.py).

`run()` is the one entry point (`invoke smoke --url` calls it; a container run wraps it). It writes a
versioned JSON result file and the page's Markdown table into `out_dir` and returns the result; the
caller turns a failure into exit status 1. One module a job: registry.py (check name -> function),
runner.py (choose and run), files.py (the result and its files), table.py (the Markdown), cli.py (the
task); one module per family of checks, each listed in registry.CHECKS.
"""

from .cli import against, task
from .files import Result, write
from .registry import check_names
from .runner import chosen, plan, recipe_block, run, select

__all__ = ["Result", "against", "check_names", "chosen", "plan", "recipe_block", "run", "select",
           "task", "write"]
