"""Return math, losses, PopArt, the learner, the fleet of actors and the training loop."""
