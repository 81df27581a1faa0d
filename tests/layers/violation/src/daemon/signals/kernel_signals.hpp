#pragma once
struct KernelSignals {};
