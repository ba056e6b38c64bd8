"""The build job: config, encoders, manifest rows, placement, and the pipeline."""
