"""CXL.mem front end (in progress: message layouts; the DCOH comes with its own issue)."""
