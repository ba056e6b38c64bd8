"""What every job shares: options, runners, worker pools, the process tree, progress,
results, failures, usage errors, input patterns and the dataset-version layout."""
