"""TrainingCXL application package: command line, training job, campaigns, benches, studies."""
