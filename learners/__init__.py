"""Return math, losses, PopArt, the learner and the Ray orchestration."""
