// Empty: the emulator (cuda_emu.h) defines __half2 and __half22float2.
