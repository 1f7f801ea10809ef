"""CXL.mem host channels: message payload layouts and the channel members of a component
(the coherency engine on them is hw/dcoh)."""
