"""Everything about producing rollouts: the engines, the generation logic shared by the actor and rollout
pools, and the one hand-over of trained weights to them."""
