"""The model (``model.py``) and the request scheduler (``scheduler.py``): yours to change."""
