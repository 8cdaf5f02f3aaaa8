"""The registry's log noise filter: drops only MLflow's hub model-card and license warnings."""

import logging

import pipeline.select.registry  # noqa: F401  (installs the filter)


def test_model_card_warning_is_dropped_and_others_kept(caplog):
    logger = logging.getLogger("mlflow.transformers")
    with caplog.at_level(logging.WARNING, logger="mlflow.transformers"):
        logger.warning("The model card could not be retrieved from the hub due to Repo id must be ...")
        logger.warning("Unable to find license information for this model. Please verify permissible usage ...")
        logger.warning("Some other warning about the model")
    messages = [r.getMessage() for r in caplog.records if r.name == "mlflow.transformers"]
    assert messages == ["Some other warning about the model"]
