"""Train a small sklearn model and save it where examples/jobs/serve-local.yaml serves it from."""

from pathlib import Path

import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

features, labels = load_iris(return_X_y=True)
model = LogisticRegression(max_iter=500).fit(features, labels)
target = Path(__file__).parent / "iris-model"
target.mkdir(exist_ok=True)
joblib.dump(model, target / "model.joblib")
print(f"saved {target / 'model.joblib'}")
