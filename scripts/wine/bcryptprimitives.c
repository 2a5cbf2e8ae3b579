/*
 * A stand-in for Windows' bcryptprimitives.dll, for the Wine smoke test
 * only (scripts/wine-smoke.sh): Go 1.22 and later take their random bytes
 * from ProcessPrng in that DLL, which Wine 8 does not ship. It fills the
 * buffer from RtlGenRandom (advapi32's SystemFunction036), which Wine
 * implements over the host's random source. Nothing of it is in a package.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buf, ULONG len);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}
