"""TrainingCXL application package: command line, training job, benches and studies."""
