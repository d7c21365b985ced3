"""What a finished job leaves: the certificate (selection.json), the report and its plots, and MLflow tracking."""
