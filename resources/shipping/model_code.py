"""The shipped model's code, as MLflow stores it ("models from code"): the model folder holds this file, no
pickle; loading it imports the pipeline class of the installed project (resources/shipping/pipeline.py)."""

from mlflow.models import set_model

from resources.shipping.pipeline import RagPipeline

set_model(RagPipeline())
