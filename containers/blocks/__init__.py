"""One module per component; each returns recipe steps (containers/recipe.py) for a stage.

Conventions: ``build(...)`` gives the steps of the build stage, ``runtime(...)`` those
of the slim stage; every function's docstring shows what it emits.
"""
