"""certsel's bundled examples: job files with the real recorded data they read (``data/``), installed with the package as
``certsel.examples``, so that ``certsel run examples/quantization.yaml`` runs the README's job from any folder
(certsel.config.loading.job_path)."""
