"""Ship the winner: an evaluated config as an MLflow pyfunc model that runs exactly the pipeline the sweep
measured (bundle.py: what goes in and the figures it was chosen on; pipeline.py: the model, which checks what
it loads; registry.py: the sweep's registered model and its `champion` alias)."""


class ExportWarning(UserWarning):
    """What an exported model lacks (the CLI prints it as one line). Here, not in bundle.py: the CLI
    tells it apart without importing MLflow."""
