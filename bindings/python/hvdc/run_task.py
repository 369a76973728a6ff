"""python -m hvdc.run_task: one rank of a job started by hvdc.run (see hvdc/runner.py)."""
from hvdc.runner import task

if __name__ == "__main__":
    task()
