"""The CERN 3DGAN calorimeter model, trained with Horovod, with FLOP-rate accounting."""
