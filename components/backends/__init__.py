"""The backends that execute a TFJob: local processes or the Training Operator."""
