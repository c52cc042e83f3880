"""Print where the ReFrame checks are:
``reframe -c "$(python3 -m chainermn_rt.reframe.checks_path)"``.

>>> CHECKS.name
'checks.py'
"""

from pathlib import Path

CHECKS = Path(__file__).resolve().parent / "checks.py"

if __name__ == "__main__":
    print(CHECKS)
