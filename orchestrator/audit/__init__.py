"""certsel audit: the job's policy repeated on its replay table against the full-table truth."""
