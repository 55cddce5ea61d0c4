"""Building blocks that agents share: networks (MLPs, heads), convolutional torsos, recurrent
cores, action distributions, running normalization, value rescaling, Dict observations and
masks, policy lag. Nothing here knows an agent; every agent may use any of it."""
