/*
 * Spin model of haltpoll::detail::ParkingMpscQueue (include/haltpoll/detail/parking_queue.hpp and
 * the park algorithm of ParkingWord in src/lib/parking_word.cpp) as the WorkerPool uses it, with the
 * inline task slot: the queue head, the consumer's park state and the slot's SLOT_CLAIMED bit share
 * ONE word, and one task node (the slot) lives in the queue's own cache line.
 *
 * The word is modelled as (q, claimed, st):
 *   q       the tasks on the stack (the pointer payload; 0 = none);
 *   claimed SLOT_CLAIMED (bit 2): a producer owns the slot, from its claim until the consumer has
 *           run the slot's task and released it. Sticky: pushes and takes keep it;
 *   st      the state bits (bits 0-1): RUN = 0, PARKED = 1, POLLING = 2.
 * Invariant: st != RUN implies q == 0 (claimed may be either).
 *
 * Producers (NPROD heap producers and NSLOT slot producers, ITEMS submissions each):
 *   heap push  one compare-exchange that replaces pointer and state bits with the new top and keeps
 *              claimed: atomic { old = st; q++; st = RUN }; then FUTEX_WAKE(1) if old == PARKED.
 *   slot       (1) claim: set claimed if it is clear (the C++ is a compare-exchange loop that
 *              retries on unrelated changes of the word and gives up when the bit is already set;
 *              a failed attempt changes nothing, so only the deciding step is modelled, as for the
 *              push's compare-exchange loop). A producer that does not get the slot falls back to
 *              a heap push. (2) Write the task into the slot: plain memory, so two steps (begin:
 *              slot_data 0 -> 1, asserting that the slot is free, i.e. not being written, written,
 *              queued, or held by the consumer; end: slot_data = 2). (3) Push the slot node exactly
 *              like a heap push (the model marks it: slot_queued), FUTEX_WAKE if the old state was
 *              PARKED.
 * Consumer (one):
 *   take       take_all and the end of park: fetch_and(SLOT_CLAIMED), which takes every node and
 *              clears the state bits but keeps claimed. Asserts q > 0 && st == RUN (park must
 *              never return without a payload).
 *   run        runs the taken tasks; if the slot was among them, reads it (asserting that the task
 *              is completely written: slot_data == 2), destroys it (slot_data = 0), and only then
 *              releases the slot with fetch_and(~SLOT_CLAIMED). The release precedes the
 *              consumer's next take or park.
 *   park       announce: load, then a compare-exchange loop: a payload -> take (already notified);
 *              else CAS (0, c, RUN) -> (0, c, POLLING), on failure (claimed changed under it) the
 *              CAS returns the current value and the loop looks again (starting from a guess or an
 *              older value instead, as the C++ may, is equivalent: the CAS checks it and returns
 *              the current value). Poll: a payload -> take (a poll hit), or the window runs out at any moment
 *              (the poll ignores claim changes). Commit: load, then a compare-exchange loop
 *              POLLING -> PARKED keeping claimed: a payload -> take (a hit at the boundary); a
 *              failure caused only by a claim change retries. Wait loop: v = load; a payload ->
 *              take; else FUTEX_WAIT(v). The futex compares the word's low 32 bits, which hold
 *              claimed and the state bits, so the kernel enqueues the waiter only if (q, claimed,
 *              st) still equals v: v has the PARKED bit set and a word holding a pointer never does
 *              (its state bits are RUN), so the payload cannot collide. Spurious wake-ups (EINTR, a
 *              stale FUTEX_WAKE), up to SPURIOUS of them, and EAGAIN just loop.
 *
 * Each statement is one atomic step of the C++ code: a load, an RMW, a futex system call (which the
 * kernel makes atomic with respect to the word), or one plain access to the slot. Spin explores
 * every interleaving, sequentially consistent (the acquire/release argument is in docs/design.md).
 * Checked: no invalid end state (a lost wake-up leaves the consumer in FUTEX_WAIT after every
 * producer has finished), every task consumed exactly once, the slot never written while it is
 * queued or in use and never read before it is written, and at the end claimed == 0 and the slot
 * neither queued nor held. Not checked: progress of the retry and wait loops (the check is a safety
 * search, -DSAFETY; a loop that spins forever is not reported), FIFO order, node contents and
 * links, ABA, memory ordering weaker than SC, and anything beyond the bounded configurations.
 *
 * Mutants (spin -D...) show that the model can fail; CTest runs BROKEN_STICKY, BROKEN_PARK_CLAIM and
 * BROKEN_ENTRY, the others by hand (spin -DBROKEN_WAKE -a parking_queue.pml && cc -DSAFETY -o
 * pan pan.c && ./pan):
 *   BROKEN_STICKY     the take clears the whole word (exchange(0), as before the slot), dropping
 *                     claimed: a second claimer writes the slot while the consumer holds it;
 *   BROKEN_PARK_CLAIM a failed POLLING -> PARKED CAS counts as a hit even when only claimed changed:
 *                     a take with q == 0;
 *   BROKEN_POLL_CLAIM the poll counts any change of the word as a hit (a claim, too): same;
 *   BROKEN_PUSH_CLAIM a heap push replaces the whole word (claimed included): a second claimer
 *                     writes the slot while it is queued or held;
 *   BROKEN_ENTRY      announces POLLING with a plain store of the loaded value (it overwrites a push
 *                     that landed after the consumer found the queue empty): a lost wake-up;
 *   BROKEN_WAKE       producers never call FUTEX_WAKE: a lost wake-up.
 */
#ifndef NPROD
#define NPROD 2
#endif
#ifndef NSLOT
#define NSLOT 1
#endif
#ifndef ITEMS
#define ITEMS 2
#endif
#ifndef SPURIOUS
#define SPURIOUS 2
#endif
#define TOTAL ((NPROD + NSLOT) * ITEMS)

#define RUN     0
#define PARKED  1
#define POLLING 2

byte q = 0;               /* the word: tasks on the stack (pointer payload) */
bool claimed = false;     /* the word: SLOT_CLAIMED */
byte st = RUN;            /* the word: state bits */
byte consumed = 0;        /* tasks the consumer ran */
bool enqueued = false;    /* the consumer is on the futex's wait queue */
byte spurious = 0;
byte slot_data = 0;       /* the slot's task: 0 = free (destroyed), 1 = being written, 2 = written */
bool slot_queued = false; /* the slot node is on the stack */
bool slot_held = false;   /* the consumer took the slot node and has not released it yet */

/* fetch_and(SLOT_CLAIMED): takes every node, clears the state bits, keeps claimed. */
inline take()
{
  atomic {
    assert(q > 0 && st == RUN);
    consumed = consumed + q;
    assert(consumed <= TOTAL);
    q = 0;
#ifdef BROKEN_STICKY
    claimed = false;                                                          /* wrong: exchange(0) */
#endif
    if
    :: slot_queued -> slot_held = true; slot_queued = false
    :: else -> skip
    fi
  }
}

/* A push of one node (heap or slot): one CAS that keeps claimed; FUTEX_WAKE(1) if it replaced PARKED. */
inline push(is_slot)
{
  atomic {
    old = st;
    q++;
    st = RUN;
    if
    :: is_slot -> slot_queued = true
    :: else -> skip
    fi;
#ifdef BROKEN_PUSH_CLAIM
    if
    :: !is_slot -> claimed = false                                            /* wrong: whole word */
    :: else -> skip
    fi
#endif
  };
#ifdef BROKEN_WAKE
  skip
#else
  if
  :: old == PARKED -> atomic { if :: enqueued -> enqueued = false :: else -> skip fi }  /* FUTEX_WAKE(1) */
  :: else -> skip
  fi
#endif
}

active proctype Consumer()
{
  bool ok;      /* the value last read (load, or a failed CAS) had no payload */
  bool ec;      /* its claimed bit: the CAS's expected value, the futex's v */
  bool failed;  /* the last CAS failed */
  do
  :: consumed == TOTAL -> break
  :: else ->
     if
     :: q > 0 -> take()                                                       /* take_all */
     :: else ->
        /* announce: CAS (0, c, RUN) -> (0, c, POLLING) */
        atomic { ok = (q == 0); ec = claimed; assert(st == RUN) };           /* load */
announce:
        if
        :: !ok -> goto take_it                                                /* already notified */
        :: else -> skip
        fi;
#ifdef BROKEN_ENTRY
        atomic { q = 0; claimed = ec; st = POLLING };                        /* wrong: a store */
#else
        atomic {
          if
          :: (q == 0 && claimed == ec && st == RUN) -> st = POLLING; failed = false
          :: else -> failed = true; ok = (q == 0); ec = claimed               /* returns the current value */
          fi
        };
        if
        :: failed -> goto announce
        :: else -> skip
        fi;
#endif
        /* poll */
        if
        :: q > 0 -> goto take_it                                              /* poll hit */
#ifdef BROKEN_POLL_CLAIM
        :: claimed != ec -> goto take_it                                      /* wrong: a claim is no hit */
#endif
        :: true -> skip                                                       /* window ran out */
        fi;
        /* commit: CAS (0, c, POLLING) -> (0, c, PARKED) */
        atomic { ok = (q == 0); ec = claimed };                               /* load */
commit:
        if
        :: !ok -> goto take_it                                                /* hit at the boundary */
        :: else -> skip
        fi;
        atomic {
          if
          :: (q == 0 && claimed == ec && st == POLLING) -> st = PARKED; failed = false
          :: else -> failed = true; ok = (q == 0); ec = claimed
          fi
        };
        if
#ifdef BROKEN_PARK_CLAIM
        :: failed -> goto take_it                                             /* wrong: may be a claim */
#else
        :: failed -> goto commit
#endif
        :: else -> skip
        fi;
wait_loop:
        atomic { ok = (q == 0); ec = claimed; assert(!ok || st == PARKED) };  /* v = load (acquire) */
        if
        :: !ok -> goto take_it
        :: else -> skip
        fi;
        atomic { if :: (q == 0 && claimed == ec && st == PARKED) -> enqueued = true :: else -> skip fi }  /* FUTEX_WAIT(v) */
        if
        :: !enqueued -> skip                                                  /* woken, or EAGAIN */
        :: enqueued && spurious < SPURIOUS -> spurious++; enqueued = false    /* spurious wake-up */
        fi;
        goto wait_loop;
take_it:
        take()
     fi;
     /* run the taken tasks; the slot's is read, destroyed, then the slot released */
     if
     :: slot_held ->
        assert(slot_data == 2);                                               /* run it */
        slot_data = 0;                                                        /* destroy it */
        atomic { claimed = false; slot_held = false }                         /* fetch_and(~SLOT_CLAIMED) */
     :: else -> skip
     fi;
     ok = false; ec = false; failed = false                                   /* dead values */
  od;
  assert(consumed == TOTAL && q == 0 && !claimed && !slot_queued && !slot_held)
}

active [NPROD] proctype Producer()
{
  byte i = 0;
  byte old;
  do
  :: i < ITEMS -> push(false); i++
  :: else -> break
  od
}

active [NSLOT] proctype SlotProducer()
{
  byte i = 0;
  byte old;
  bool got;
  do
  :: i < ITEMS ->
     atomic { if :: claimed -> got = false :: else -> claimed = true; got = true fi };  /* claim */
     if
     :: got ->
        atomic { assert(slot_data == 0 && !slot_queued && !slot_held); slot_data = 1 }  /* write the task: */
        slot_data = 2;                                                        /* begin, end */
        push(true)
     :: else -> push(false)                                                   /* fall back to the heap */
     fi;
     i++
  :: else -> break
  od
}
