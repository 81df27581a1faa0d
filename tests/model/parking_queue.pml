/*
 * Spin model of haltpoll::detail::ParkingMpscQueue (include/haltpoll/detail/parking_queue.hpp and
 * the park algorithm of ParkingWord in src/lib/parker.cpp) as the WorkerPool uses it: the queue
 * head and the consumer's park state share ONE word. Producers push a task (one compare-exchange
 * that replaces the whole word, state bits included, with the new top) and call FUTEX_WAKE when
 * the value they replaced was PARKED. The consumer takes every queued task (exchange to 0) and,
 * when there is none, parks: CAS 0 -> POLLING, poll, CAS POLLING -> PARKED, FUTEX_WAIT(PARKED)
 * while the word is PARKED, then takes. Spin explores every interleaving (sequentially
 * consistent; the acquire/release argument is in docs/design.md). A lost wake-up leaves the
 * consumer blocked in FUTEX_WAIT after every producer has finished: an invalid end state. The
 * final assertion checks that every task was consumed exactly once.
 *
 * The word is modelled as (q, st): q = tasks on the stack (the pointer payload, 0 = none), st =
 * the state bits (RUN = 0, POLLING, PARKED). Invariant: st != RUN implies q == 0. FUTEX_WAIT
 * compares the word's low 32 bits with PARKED; a pointer payload never equals it (alignment), so
 * "low 32 bits == PARKED" is "q == 0 && st == PARKED".
 *
 * Each statement is one atomic step of the C++ code: a load, an RMW, or a futex system call (which
 * the kernel makes atomic with respect to the word). The consumer may be woken spuriously up to
 * SPURIOUS times; the bound keeps a lost wake-up observable as a deadlock.
 *
 * Mutants (spin -D...) show that the model can fail; CTest runs BROKEN_ENTRY, the other by hand:
 * BROKEN_ENTRY announces POLLING with a plain store (it overwrites a push that landed after the
 * consumer found the queue empty), BROKEN_WAKE never calls FUTEX_WAKE.
 */
#ifndef NPROD
#define NPROD 2
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef SPURIOUS
#define SPURIOUS 2
#endif
#define TOTAL (NPROD * ITEMS)

#define RUN     0
#define PARKED  1
#define POLLING 2

byte q = 0;            /* payload: tasks on the stack */
byte st = RUN;         /* the word's state bits */
byte consumed = 0;     /* tasks the consumer ran */
bool enqueued = false; /* the consumer is on the futex's wait queue */
byte spurious = 0;

active proctype Consumer()
{
  bool ok;
  do
  :: consumed == TOTAL -> break
  :: else ->
     if
     :: q > 0 -> atomic { consumed = consumed + q; q = 0 }                                /* take_all: exchange(0) */
     :: else ->
#ifdef BROKEN_ENTRY
        q = 0; st = POLLING; ok = true;                                                   /* wrong: a store */
#else
        atomic { if :: (q == 0 && st == RUN) -> st = POLLING; ok = true :: else -> ok = false fi }  /* CAS 0->POLLING */
#endif
        if
        :: !ok -> goto take                                                               /* a payload: take it */
        :: else -> skip
        fi;
        if
        :: q > 0 -> goto take                                                             /* poll hit */
        :: true -> skip                                                                   /* window ran out */
        fi;
        atomic { if :: (q == 0 && st == POLLING) -> st = PARKED; ok = true :: else -> ok = false fi }  /* CAS POLLING->PARKED */
        if
        :: !ok -> goto take                                                               /* hit at the boundary */
        :: else -> skip
        fi;
wait_loop:
        if
        :: !(q == 0 && st == PARKED) -> goto take                                         /* acquire load */
        :: else -> skip
        fi;
        atomic { if :: (q == 0 && st == PARKED) -> enqueued = true :: else -> skip fi }   /* FUTEX_WAIT(PARKED) */
        if
        :: !enqueued -> skip                                                              /* woken, or EAGAIN */
        :: enqueued && spurious < SPURIOUS -> spurious++; enqueued = false               /* spurious wake-up */
        fi;
        goto wait_loop;
take:
        atomic { assert(q > 0 && st == RUN); consumed = consumed + q; q = 0 }             /* exchange(0) */
     fi
  od;
  assert(consumed == TOTAL && q == 0)
}

active [NPROD] proctype Producer()
{
  byte i = 0;
  byte old;
  do
  :: i < ITEMS ->
     atomic { old = st; q++; st = RUN };                                                  /* push: CAS, the whole word */
#ifdef BROKEN_WAKE
     skip;
#else
     if
     :: old == PARKED -> atomic { if :: enqueued -> enqueued = false :: else -> skip fi } /* FUTEX_WAKE(1) */
     :: else -> skip
     fi;
#endif
     i++
  :: else -> break
  od
}
