// Empty: the emulator (cuda_emu.h) defines __half, __half2 and their conversions.
