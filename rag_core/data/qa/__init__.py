"""QA sets: reading the formats teams already have (BEIR, Ragas, MLflow), generating one from a corpus,
and checking one's quality."""
